package providersdk

import "strings"

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
