package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestSanitize(t *testing.T) {
	connected := func(endpoint, secret string) *banlieuev1.Provider {
		return &banlieuev1.Provider{
			ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vc"},
			Spec: banlieuev1.ProviderSpec{Connection: banlieuev1.Connection{
				Endpoint: endpoint, CredentialsRef: banlieuev1.LocalObjectReference{Name: secret},
			}},
		}
	}
	vc := connected("https://vc.example/sdk", "vc-creds")
	for _, tc := range []struct {
		name     string
		provider *banlieuev1.Provider
		in, want string
	}{
		{"without a Provider the text is only redacted", nil,
			"GET https://admin:pw@vc.example/sdk?token=x failed", "GET https://vc.example/sdk failed"},
		{"a text naming nothing of the Provider is unchanged", vc,
			"datastore ds1 is full", "datastore ds1 is full"},
		{"the endpoint with a password and a token is the backend", vc,
			`Post "https://admin:pw@vc.example/sdk?token=x": EOF`, `Post "the backend": EOF`},
		{"the endpoint as written is the backend", vc,
			"cannot reach https://vc.example/sdk.", "cannot reach the backend."},
		{"another URL of the endpoint's host is the backend", vc,
			"GET https://vc.example:443/folder/ds1?dcPath=dc1 returned 500", "GET the backend returned 500"},
		{"the host alone is the backend, whatever its case", vc,
			"dial tcp: lookup VC.example: no such host", "dial tcp: lookup the backend: no such host"},
		{"the host with a port is the backend with the port", vc,
			"dial tcp vc.example:443: i/o timeout", "dial tcp the backend:443: i/o timeout"},
		{"a longer host that contains the endpoint's host stays", vc,
			"vc.example.org and myvc.example answer", "vc.example.org and myvc.example answer"},
		{"another host's URL stays, redacted", vc,
			"download https://u:p@images.example/a.qcow2?sig=1 failed", "download https://images.example/a.qcow2 failed"},
		{"the Secret named by an API error is the credentials Secret", vc,
			`secrets "vc-creds" not found`, "the Provider's credentials Secret not found"},
		{"the Secret named with its namespace is the credentials Secret", vc,
			"Secret infra/vc-creds has no key password", "the Provider's credentials Secret has no key password"},
		{"the bare Secret name is replaced, a longer name is not", vc,
			"vc-creds and vc-creds-old differ", "the Provider's credentials Secret and vc-creds-old differ"},
		{"a name replaced first does not rewrite the words put in for another", connected("https://backend.example/api2/json", "backend"),
			"login to https://backend.example/api2/json with backend failed", "login to the backend with the Provider's credentials Secret failed"},
		{"a libvirt URI with a user is the backend", connected("qemu+ssh://root@kvm.example/system", "kvm"),
			"failed to connect to qemu+ssh://root@kvm.example/system: ssh: handshake failed", "failed to connect to the backend: ssh: handshake failed"},
		{"a libvirt URI without a host is the backend", connected("qemu:///system", ""),
			"cannot open qemu:///system: permission denied", "cannot open the backend: permission denied"},
		{"the Provider's own name stays where it is also the endpoint's host and the Secret's name", connected("test://vc", "vc"),
			"Provider infra/vc is paused; vc does not answer", "Provider infra/vc is paused; the backend does not answer"},
		{"a loopback IPv6 host is the backend", connected("https://[::1]:8006/api2/json", "pve"),
			"dial tcp [::1]:8006: connect: connection refused", "dial tcp [the backend]:8006: connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Sanitize(tc.provider, tc.in)); diff != "" {
				t.Errorf("Sanitize(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// BenchmarkSanitize is the cost of sanitizing one machine's conditions, as core does
// on every mirror: a message that names the Provider's endpoint and Secret, and two
// empty ones.
func BenchmarkSanitize(b *testing.B) {
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vc"},
		Spec: banlieuev1.ProviderSpec{Connection: banlieuev1.Connection{
			Endpoint: "https://vc.example/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: "vc-creds"},
		}},
	}
	messages := []string{`Post "https://vc.example/sdk": secret infra/vc-creds has no password`, "", ""}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range messages {
			Sanitize(p, m)
		}
	}
}
