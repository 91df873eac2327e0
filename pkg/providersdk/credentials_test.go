package providersdk

import (
	"strings"
	"testing"
)

func TestCredentialProblem(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  map[string][]byte
		wants string // "" for a usable value
	}{
		{"a usable value", map[string][]byte{"password": []byte("s3cret with\ttab")}, ""},
		{"no key", map[string][]byte{"passwd": []byte("x")}, `has no "password" key`},
		{"an empty value", map[string][]byte{"password": {}}, `has an empty "password" key`},
		{"a value written with echo", map[string][]byte{"password": []byte("s3cret\n")}, "echo -n"},
		{"a value ending in CR", map[string][]byte{"password": []byte("s3cret\r")}, "ends in a newline"},
		{"a control character inside", map[string][]byte{"password": []byte("s3\x00cret")}, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CredentialProblem(tc.data, "password")
			if (tc.wants == "") != (got == "") || !strings.Contains(got, tc.wants) {
				t.Errorf("CredentialProblem = %q, want one saying %q", got, tc.wants)
			}
			if strings.Contains(got, "s3") {
				t.Errorf("the problem %q quotes the value", got)
			}
		})
	}
}
