package vsphere

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// FuzzGuestMetadata checks that the meta-data a VM gets in guestinfo, read as YAML the
// way cloud-init reads it, holds exactly the host name the driver meant for any name
// Kubernetes accepts: a string (never the number or boolean YAML would make of 0777 or
// yes), with labels of at most 63 characters.
func FuzzGuestMetadata(f *testing.F) {
	for _, name := range []string{"web-1", "web-1.prod", "0777", "1.10", "yes", "null", "0x1f", "1e5", "9-lives", strings.Repeat("a", 253)} {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // the API server refuses the name
		}
		m := newMachine("0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f")
		m.Name = name
		var encoded string
		for _, o := range extraConfig(m) {
			if o.Key == guestinfoMetadata {
				encoded = o.Value
			}
		}
		raw, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			t.Fatalf("guestinfo.metadata is not base64: %v", err)
		}
		var meta map[string]any
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			t.Fatalf("meta-data of %q is not YAML: %v\n%s", name, err, raw)
		}
		got, ok := meta["local-hostname"].(string)
		if !ok || got != hostname(name) {
			t.Fatalf("local-hostname of %q reads as %#v, want the string %q\n%s", name, meta["local-hostname"], hostname(name), raw)
		}
		for _, label := range strings.Split(got, ".") {
			if msgs := validation.IsDNS1123Label(label); len(msgs) > 0 {
				t.Errorf("host name %q of %q has label %q: %v", got, name, label, msgs)
			}
		}
		if meta["instance-id"] != string(m.UID) {
			t.Errorf("instance-id reads as %#v, want %s", meta["instance-id"], m.UID)
		}
	})
}

// FuzzEndpointURL checks that a Provider's endpoint either is refused with a Permanent
// error or parses to an http(s) URL with a host and no credentials, which parses again
// to itself.
func FuzzEndpointURL(f *testing.F) {
	for _, e := range []string{"https://vcenter.example.com/sdk", "vcenter.example.com", " https://user:pw@vc:443/sdk ", "https://[::1", "ftp://vc/sdk", "", "http://10.0.0.1"} {
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
		if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			t.Fatalf("endpoint %q parsed to %s (scheme %q, host %q, user %v)", endpoint, u, u.Scheme, u.Host, u.User)
		}
		again, err := endpointURL(u.String())
		if err != nil || again.String() != u.String() {
			t.Fatalf("endpoint %q parsed to %s, which parses to %v, %v", endpoint, u, again, err)
		}
	})
}
