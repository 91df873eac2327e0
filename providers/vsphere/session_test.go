package vsphere

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

func TestConnect(t *testing.T) {
	sim := vspheretest.Start(t)
	otherCA, err := vspheretest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*providersdk.ProviderInfo)
		// check says what is wrong with the error, or "".
		check func(error) string
	}{{
		name:  "the CA bundle verifies vCenter's certificate, so the session logs in",
		check: wantNoError,
	}, {
		name: "a bare host gets https and /sdk",
		edit: func(i *providersdk.ProviderInfo) {
			i.Provider.Spec.Connection.Endpoint = strings.TrimSuffix(strings.TrimPrefix(sim.URL, "https://"), "/sdk")
		},
		check: wantNoError,
	}, {
		name: "a wrong password is Unauthorized, naming the Secret but not the password",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"username": []byte(sim.Username), "password": []byte("hunter2")}
		},
		check: wantErr(providersdk.IsUnauthorized, "rejected the username or password in Secret infra/vc-credentials", "hunter2"),
	}, {
		name:  "a CA bundle that did not sign vCenter's certificate is Unreachable with the caBundle hint",
		edit:  func(i *providersdk.ProviderInfo) { i.CABundle = otherCA },
		check: wantErr(providersdk.IsUnreachable, "signed by an unknown authority; set spec.connection.caBundle", ""),
	}, {
		name:  "no CA bundle verifies against the system roots, which do not hold the simulator's CA",
		edit:  func(i *providersdk.ProviderInfo) { i.CABundle = nil },
		check: wantErr(providersdk.IsUnreachable, "spec.connection.caBundle", ""),
	}, {
		name: "insecureSkipTLSVerify connects without a CA bundle",
		edit: func(i *providersdk.ProviderInfo) {
			i.CABundle = nil
			i.Provider.Spec.Connection.InsecureSkipTLSVerify = ptr.To(true)
		},
		check: wantNoError,
	}, {
		name:  "a Secret without a password key is Permanent, naming the key",
		edit:  func(i *providersdk.ProviderInfo) { i.Credentials = map[string][]byte{"username": []byte(sim.Username)} },
		check: wantErr(providersdk.IsPermanent, `credentials Secret infra/vc-credentials has no "password" key (it needs "username" and "password")`, ""),
	}, {
		name: "a Secret with an empty username is Permanent, naming the key",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"username": {}, "password": []byte(sim.Password)}
		},
		check: wantErr(providersdk.IsPermanent, `credentials Secret infra/vc-credentials has an empty "username" key`, sim.Password),
	}, {
		name: "a password that ends in a newline, as echo writes it, is Permanent and says how to write it",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"username": []byte(sim.Username), "password": []byte(sim.Password + "\n")}
		},
		check: wantErr(providersdk.IsPermanent, `has a "password" key that ends in a newline, as echo without -n writes it; write the value with echo -n`, sim.Password),
	}, {
		name: "a user name with a control character in it is Permanent",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"username": []byte("admin\x00"), "password": []byte(sim.Password)}
		},
		check: wantErr(providersdk.IsPermanent, `has a "username" key with a control character in it`, sim.Password),
	}, {
		name:  "a closed port is Unreachable, saying the connection was refused",
		edit:  func(i *providersdk.ProviderInfo) { i.Provider.Spec.Connection.Endpoint = "https://127.0.0.1:1/sdk" },
		check: wantErr(providersdk.IsUnreachable, "refused the connection", ""),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := infoFor(sim, providerFor(sim))
			if tt.edit != nil {
				tt.edit(&info)
			}
			cl, err := NewDriver().Connect(context.Background(), info)
			t.Logf("Connect: %v", err)
			if msg := tt.check(err); msg != "" {
				t.Fatal(msg)
			}
			if cl != nil {
				if err := cl.Disconnect(context.Background()); err != nil {
					t.Errorf("Disconnect: %v", err)
				}
			}
		})
	}
}

func wantNoError(err error) string {
	if err != nil {
		return "unexpected error: " + err.Error()
	}
	return ""
}

// wantErr checks an error's type and that its text holds want and not notWant.
func wantErr(is func(error) bool, want, notWant string) func(error) string {
	return func(err error) string {
		switch {
		case err == nil:
			return "no error, want one saying " + want
		case !is(err):
			return "error of the wrong type: " + err.Error()
		case !strings.Contains(err.Error(), want):
			return "error " + err.Error() + " does not say " + want
		case notWant != "" && strings.Contains(err.Error(), notWant):
			return "error " + err.Error() + " holds " + notWant
		}
		return ""
	}
}

func TestSessionLogsInOnceAndOutOnDisconnect(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	cl, err := NewDriver().Connect(ctx, infoFor(sim, providerFor(sim)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.(providersdk.InventoryReader).Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := sim.Sessions(ctx); err != nil || n != 1 {
		t.Fatalf("sessions after Connect = %d, %v; want 1", n, err)
	}
	if err := cl.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := sim.Sessions(ctx); err != nil || n != 0 {
		t.Fatalf("sessions after Disconnect = %d, %v; want 0", n, err)
	}
}

func TestStoppedVCenterIsUnreachableAndTheSessionRecovers(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())

	sim.Stop()
	_, err := s.Inventory(ctx)
	if msg := wantErr(providersdk.IsUnreachable, "vCenter 127.0.0.1:", "")(err); msg != "" {
		t.Fatal(msg)
	}
	if _, err := s.Observe(ctx, newMachine("0d9f5b6e-3c55-4f57-9d0e-6f3f1b6b2a01")); !providersdk.IsUnreachable(err) {
		t.Fatalf("Observe while stopped: %v, want Unreachable", err)
	}

	// A restart forgets the session: the next call logs in again by itself.
	if err := sim.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	inv, err := s.Inventory(ctx)
	if err != nil {
		t.Fatalf("Inventory after restart: %v", err)
	}
	if len(inv.FailureDomains) == 0 {
		t.Fatal("no failure domains after restart")
	}
	if n, err := sim.Sessions(ctx); err != nil || n != 1 {
		t.Fatalf("sessions after re-login = %d, %v; want 1", n, err)
	}
}

func TestEndpointURL(t *testing.T) {
	tests := []struct{ name, endpoint, want, wantErr string }{
		{name: "a bare host gets https and /sdk", endpoint: "vc.example.com", want: "https://vc.example.com/sdk"},
		{name: "a trailing slash gets /sdk", endpoint: "https://vc.example.com/", want: "https://vc.example.com/sdk"},
		{name: "a fragment is dropped and the path is /sdk", endpoint: "vc.example.com/#", want: "https://vc.example.com/sdk"},
		{name: "credentials and a query are dropped", endpoint: " https://admin:pw@vc.example.com:8443/sdk?x=1 ", want: "https://vc.example.com:8443/sdk"},
		{name: "a port without a host is refused", endpoint: "https://:443/sdk", wantErr: `spec.connection.endpoint "https://:443/sdk" is not a vCenter URL`},
		{name: "another scheme is refused", endpoint: "ftp://vc.example.com", wantErr: "must be an https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := endpointURL(tt.endpoint)
			switch {
			case tt.wantErr != "":
				if !providersdk.IsPermanent(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("endpointURL(%q) = %v, %v; want a Permanent error saying %q", tt.endpoint, u, err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("endpointURL(%q): %v", tt.endpoint, err)
			case u.String() != tt.want:
				t.Errorf("endpointURL(%q) = %s, want %s", tt.endpoint, u, tt.want)
			}
		})
	}
}
