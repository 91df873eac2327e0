// Package redact removes credentials from the URLs and texts that banlieue shows a person:
// conditions, Events and log lines. It is the one place that decides what of a URL may
// be quoted; every message that quotes an endpoint, an image source or a backend's error
// goes through it.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Placeholder stands for a URL that cannot be parsed, and so cannot be shown safely.
const Placeholder = "[redacted URL]"

// URL returns raw without its user information, query and fragment, the parts that
// carry passwords and tokens; a raw that does not parse as a URL is Placeholder.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Placeholder
	}
	if u.User == nil && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery {
		return raw
	}
	u.User, u.RawQuery, u.Fragment, u.ForceQuery = nil, "", "", false
	return u.String()
}

// urlInText matches what looks like an absolute URL inside free text, up to the first
// space, quote or bracket that ends it in a Go error or a backend's message.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>\x60]+`)

// userinfoInText matches "user:password@host" written without a scheme.
var userinfoInText = regexp.MustCompile(`[^\s"'<>/@:\x60]+:[^\s"'<>/@\x60]*@`)

// Text returns s with every URL in it passed through URL and every "user:password@"
// dropped, so that a backend's or a library's error text can be quoted in a condition.
func Text(s string) string {
	if !strings.ContainsAny(s, "@?#") {
		return s
	}
	return userinfoInText.ReplaceAllString(EachURL(s, URL), "")
}

// EachURL returns s with every absolute URL in it replaced by replace(url). A URL that
// ends a sentence keeps its punctuation outside: "see https://host/x." passes
// "https://host/x".
func EachURL(s string, replace func(url string) string) string {
	return urlInText.ReplaceAllStringFunc(s, func(raw string) string {
		trimmed := strings.TrimRight(raw, ".,;:)]}")
		return replace(trimmed) + raw[len(trimmed):]
	})
}
