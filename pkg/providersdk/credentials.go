package providersdk

import (
	"bytes"
	"fmt"
)

// CredentialProblem says what is wrong with key in a credentials Secret's data, as the
// end of a sentence about the Secret ("has no "password" key"), or "" when the value is
// usable. It never quotes the value. A value that ends in a newline is the usual mistake
// of a Secret written with echo: a backend would refuse it as a wrong password, and an
// HTTP client refuses it in a header before the request leaves, which reads as an
// unreachable backend; both hide the real cause.
func CredentialProblem(data map[string][]byte, key string) string {
	v, ok := data[key]
	switch {
	case !ok:
		return fmt.Sprintf("has no %q key", key)
	case len(v) == 0:
		return fmt.Sprintf("has an empty %q key", key)
	case v[len(v)-1] == '\n' || v[len(v)-1] == '\r':
		return fmt.Sprintf("has a %q key that ends in a newline, as echo without -n writes it; "+
			"write the value with echo -n, or with kubectl create secret generic --from-literal", key)
	case bytes.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
		return fmt.Sprintf("has a %q key with a control character in it", key)
	}
	return ""
}
