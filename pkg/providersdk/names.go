package providersdk

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DNSLabel makes s a DNS label for a failure domain's name: lowercase letters, digits,
// '-' and '.', at most 63 characters, starting and ending with a letter or digit;
// fallback when nothing is left of s.
func DNSLabel(s, fallback string) string {
	if out := cleanName(strings.ToLower(s), "-.", '-'); out != "" {
		return out
	}
	return fallback
}

// LabelValue makes s a valid Kubernetes label value: letters, digits, '-', '_' and '.',
// at most 63 characters, starting and ending with a letter or digit.
func LabelValue(s string) string { return cleanName(s, "-_.", '_') }

// NameRules are what a backend takes as a VM's name, for BackendName.
type NameRules struct {
	// MaxLen is the longest name the backend takes, in bytes. Less than
	// MinBackendNameLen counts as MinBackendNameLen.
	MaxLen int
	// DNSLabel is set when the name must be one DNS label (lowercase letters, digits
	// and '-', at most 63 characters whatever MaxLen says): for a backend that takes
	// nothing else, or one that makes the guest's host name from the name, where a '.'
	// would cut it short.
	DNSLabel bool
}

// MinBackendNameLen is the shortest MaxLen BackendName honours: the hash and a few
// readable characters.
const MinBackendNameLen = 16

// backendNameHashLen is the length of the hash BackendName appends: 10 base32
// characters, 50 bits, so that no one finds a second pair of names with the same hash
// by trying.
const backendNameHashLen = 10

// nameHash encodes BackendName's hash in lowercase base32, which a DNS label takes.
var nameHash = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// BackendName is the name of the VM of machine namespace/name on a backend that takes
// names by rules. Two different machines never get the same name, whatever their
// namespaces: a tenant cannot make a name that another tenant's VM has (where only a
// DNS label fits, short of finding two pairs with the same 50-bit hash).
//
// Where the backend takes a '.' (rules.DNSLabel unset), the name is "<namespace>.<name>":
// a namespace is a DNS label and has no '.', so the first '.' ends it and the pair reads
// back. It is cut to rules.MaxLen with "-" and a hash of "<namespace>/<name>" (so two
// long names of one namespace differ); with MaxLen of at least 75 the cut keeps the
// whole namespace and its '.', so names of two namespaces still differ by their text.
//
// Where the backend takes only a DNS label, "<namespace>-<name>" no longer reads back
// ("tenant-a"/"b-web" and "tenant-a-b"/"web" both give "tenant-a-b-web"), so the name is
// "<namespace>-<name>-<hash>", always with the hash, the name's '.' made '-', cut before
// the hash to fit rules.MaxLen.
//
// namespace and name are Kubernetes names (a DNS label and a DNS subdomain). Anything
// else (upper case, other characters, an empty part) gets the hash too, its other
// characters made '-', so the result is what the backend takes.
func BackendName(namespace, name string, rules NameRules) string {
	limit := max(rules.MaxLen, MinBackendNameLen)
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	hash := nameHash.EncodeToString(sum[:])[:backendNameHashLen]
	if rules.DNSLabel {
		limit = min(limit, validation.DNS1123LabelMaxLength)
		return withHash(cleanText(strings.ToLower(namespace+"-"+name), "-"), hash, limit)
	}
	full := namespace + "." + name
	if len(full) <= limit && len(validation.IsDNS1123Label(namespace)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0 {
		return full
	}
	return withHash(cleanText(strings.ToLower(full), "-."), hash, limit)
}

// withHash is readable cut to leave room for "-" and hash within limit, trimmed of
// punctuation at its ends, then "-" and hash; hash alone when nothing readable is left.
func withHash(readable, hash string, limit int) string {
	readable = strings.Trim(readable[:min(len(readable), limit-len(hash)-1)], "-.")
	if readable == "" {
		return hash
	}
	return readable + "-" + hash
}

// cleanText replaces every byte of s that is neither a lowercase ASCII letter or digit
// nor in punct with '-'.
func cleanText(s, punct string) string {
	b := []byte(s)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && strings.IndexByte(punct, c) < 0 {
			b[i] = '-'
		}
	}
	return string(b)
}

// cleanName replaces every byte of s that is neither an ASCII letter or digit nor in
// punct with repl, and trims the result to 63 bytes that start and end with a letter or
// digit.
func cleanName(s, punct string, repl byte) string {
	b := []byte(s)
	for i, c := range b {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && strings.IndexByte(punct, c) < 0 {
			b[i] = repl
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.Trim(string(b), punct)
}
