package pve

import (
	"testing"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// FuzzEndpointURL checks that a Provider's endpoint either is refused with a Permanent
// error or parses to an https URL with a host and port and no credentials, query or
// fragment, which parses again to itself.
func FuzzEndpointURL(f *testing.F) {
	for _, e := range []string{"https://pve.example.com:8006/api2/json", "pve.example.com", "pve:8006", "http://pve", "https://[::1", "", "https://u:p@pve/api2/json?x#y"} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, endpoint string) {
		u, err := endpointURL(endpoint)
		if err != nil {
			if !providersdk.IsPermanent(err) {
				t.Fatalf("endpoint %q: error %v is not Permanent", endpoint, err)
			}
			return
		}
		if u.Scheme != "https" || u.Host == "" || u.Port() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("endpoint %q parsed to %s", endpoint, u)
		}
		again, err := endpointURL(u.String())
		if err != nil || again.String() != u.String() {
			t.Fatalf("endpoint %q parsed to %s, which parses to %v, %v", endpoint, u, again, err)
		}
	})
}
