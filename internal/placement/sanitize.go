package placement

import (
	"net/url"
	"regexp"
	"strings"
	"sync"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
)

// The neutral words that stand, in what a VM's tenant reads, for what only the
// Provider's administrator may see.
const (
	// BackendWord stands for the Provider's connection.endpoint and its host.
	BackendWord = "the backend"
	// CredentialsWord stands for the name of the Provider's credentials Secret.
	CredentialsWord = "the Provider's credentials Secret" //nolint:gosec // the words that stand for a Secret's name, no credential
)

// Markers hold the place of a replaced name until the end, so that a name replaced
// later cannot match inside a word put in earlier. They are private-use runes, which no
// message of the API server or a backend contains.
const (
	backendMarker     = "\uE000"
	credentialsMarker = "\uE001"
	providerMarker    = "\uE002"
)

// Sanitize returns s fit for the tenant of a VM on Provider p, for a message core copies
// into the VM's status or Events from a machine, an image row or a Provider condition:
// every URL and "user:password@" is redacted (redact.Text), and p's connection.endpoint,
// any URL or name of the endpoint's host, and the name of p's credentials Secret are
// replaced by BackendWord and CredentialsWord. With a nil p it only redacts.
func Sanitize(p *banlieuev1.Provider, s string) string {
	if s == "" {
		// Most condition messages core copies are empty: nothing to compile a pattern for.
		return s
	}
	s = redact.Text(noMarkers.Replace(s))
	if p == nil {
		return s
	}
	// The Provider's own namespace/name, which the tenant reads in status.scheduled, stays
	// even when its name is also the endpoint's host or the Secret's name.
	key := p.Namespace + "/" + p.Name
	s = replaceName(s, regexp.QuoteMeta(key), providerMarker)
	if ep := p.Spec.Connection.Endpoint; ep != "" {
		host := endpointHost(ep)
		if host != "" {
			// Any URL of the endpoint's host, whatever its path, port or scheme.
			s = redact.EachURL(s, func(raw string) string {
				if u, err := url.Parse(raw); err == nil && strings.EqualFold(u.Hostname(), host) {
					return backendMarker
				}
				return raw
			})
		}
		// The endpoint as written, and as redact.Text leaves it, whatever it is.
		for _, form := range []string{ep, redact.URL(ep)} {
			if form != redact.Placeholder {
				s = strings.ReplaceAll(s, form, backendMarker)
			}
		}
		if host != "" {
			s = replaceName(s, regexp.QuoteMeta(host), backendMarker)
		}
	}
	if name := p.Spec.Connection.CredentialsRef.Name; name != "" {
		// "Secret infra/name", `secrets "name"` (an API error) and the bare name all become
		// the one phrase, which already says it is a Secret.
		ref := `(?:` + regexp.QuoteMeta(p.Namespace) + `/)?` + regexp.QuoteMeta(name)
		s = replaceName(s, `(?:secrets?\s+)?(?:"`+ref+`"|'`+ref+`'|`+ref+`)`, credentialsMarker)
	}
	return strings.ReplaceAll(fromMarkers.Replace(s), providerMarker, key)
}

var (
	// noMarkers removes the markers from a message before any is put in.
	noMarkers = strings.NewReplacer(backendMarker, "", credentialsMarker, "", providerMarker, "")
	// fromMarkers puts the neutral words in the markers' places.
	fromMarkers = strings.NewReplacer(backendMarker, BackendWord, credentialsMarker, CredentialsWord)
)

// endpointHost returns the host of a Provider endpoint: a URL's, or the host of a bare
// "host" or "host:port"; "" when it names none (qemu:///system).
func endpointHost(ep string) string {
	if !strings.Contains(ep, "://") {
		ep = "//" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// replaceName replaces, case-insensitively, every match of pattern in s that is not part
// of a longer name (a letter, digit, '.', '-' or '_' next to it; a '.' that ends a
// sentence does not count) by with.
func replaceName(s, pattern, with string) string {
	re := compiled(`(?i)` + pattern)
	var b strings.Builder
	pos := 0
	for pos < len(s) {
		m := re.FindStringIndex(s[pos:])
		if m == nil {
			break
		}
		start, end := pos+m[0], pos+m[1]
		if end == start {
			break
		}
		if (start > 0 && nameByte(s[start-1])) || !nameEnds(s, end) {
			// Not a whole name here; one may still start a byte later.
			b.WriteString(s[pos : start+1])
			pos = start + 1
			continue
		}
		b.WriteString(s[pos:start])
		b.WriteString(with)
		pos = end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// nameByte reports whether c can be part of a host or object name.
func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}

// nameEnds reports whether a name that stops before s[end] is whole: nothing of a name
// follows, or only a '.' that ends a sentence.
func nameEnds(s string, end int) bool {
	if end < len(s) && s[end] == '.' {
		end++
	}
	return end >= len(s) || !nameByte(s[end])
}

// patterns are the compiled patterns of replaceName, by pattern. They come from the
// Providers' names, endpoints and Secret names, a few per Provider, and a message is
// sanitized for every condition core mirrors: compiling them once saves most of the work.
var patterns = struct {
	sync.Mutex
	byPattern map[string]*regexp.Regexp
}{byPattern: map[string]*regexp.Regexp{}}

// maxPatterns bounds patterns: past it, as after many Providers renamed, it starts anew.
const maxPatterns = 4096

// compiled returns pattern compiled, from patterns when it was compiled before.
func compiled(pattern string) *regexp.Regexp {
	patterns.Lock()
	defer patterns.Unlock()
	if re, ok := patterns.byPattern[pattern]; ok {
		return re
	}
	if len(patterns.byPattern) >= maxPatterns {
		clear(patterns.byPattern)
	}
	re := regexp.MustCompile(pattern)
	patterns.byPattern[pattern] = re
	return re
}
