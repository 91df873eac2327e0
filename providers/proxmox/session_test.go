package proxmox

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

func TestConnect(t *testing.T) {
	sim := proxmoxtest.Start(t)
	other := proxmoxtest.Start(t) // its CA did not sign sim's certificate
	tests := []struct {
		name  string
		edit  func(*providersdk.ProviderInfo)
		check func(error) string
	}{{
		name:  "an API token verified against the CA bundle connects",
		check: wantErr(nil, "", ""),
	}, {
		name:  "a user and password connect",
		edit:  func(i *providersdk.ProviderInfo) { i.Credentials = sim.PasswordCredentials() },
		check: wantErr(nil, "", ""),
	}, {
		name: "a wrong token secret is Unauthorized, naming the Secret but not the secret",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"tokenID": []byte(sim.TokenID), "tokenSecret": []byte("hunter2-token")}
		},
		check: wantErr(providersdk.IsUnauthorized, "rejected the API token or password in Secret infra/pve-credentials", "hunter2-token"),
	}, {
		name: "a wrong password is Unauthorized, without the password",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"username": []byte(sim.Username), "password": []byte("hunter2-pw")}
		},
		check: wantErr(providersdk.IsUnauthorized, "Secret infra/pve-credentials", "hunter2-pw"),
	}, {
		name:  "a token without its secret is Permanent, naming the missing key",
		edit:  func(i *providersdk.ProviderInfo) { i.Credentials = map[string][]byte{"tokenID": []byte(sim.TokenID)} },
		check: wantErr(providersdk.IsPermanent, `credentials Secret infra/pve-credentials has no "tokenSecret" key`, sim.TokenID),
	}, {
		name:  "a Secret with neither a token nor a password is Permanent, naming a key",
		edit:  func(i *providersdk.ProviderInfo) { i.Credentials = map[string][]byte{} },
		check: wantErr(providersdk.IsPermanent, `has no "username" key (it needs "tokenID" and "tokenSecret", or "username" and "password")`, ""),
	}, {
		name: "a token with an empty secret is Permanent, naming the key",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"tokenID": []byte(sim.TokenID), "tokenSecret": {}}
		},
		check: wantErr(providersdk.IsPermanent, `credentials Secret infra/pve-credentials has an empty "tokenSecret" key`, sim.TokenID),
	}, {
		// Go refuses a line break in the Authorization header before the request leaves,
		// which read as an unreachable Proxmox VE with advice to check the endpoint.
		name: "a token secret that ends in a newline, as echo writes it, is Permanent, not Unreachable",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"tokenID": []byte(sim.TokenID), "tokenSecret": []byte(sim.TokenSecret + "\n")}
		},
		check: wantErr(providersdk.IsPermanent, `has a "tokenSecret" key that ends in a newline, as echo without -n writes it; write the value with echo -n`, sim.TokenSecret),
	}, {
		name: "a token ID with a line break inside is Permanent, not Unreachable",
		edit: func(i *providersdk.ProviderInfo) {
			i.Credentials = map[string][]byte{"tokenID": []byte(sim.TokenID + "\r\nX-Injected: 1"), "tokenSecret": []byte(sim.TokenSecret)}
		},
		check: wantErr(providersdk.IsPermanent, `has a "tokenID" key with a control character in it`, sim.TokenSecret),
	}, {
		name:  "a CA bundle that did not sign the certificate is Unreachable with the caBundle hint",
		edit:  func(i *providersdk.ProviderInfo) { i.CABundle = other.CACert },
		check: wantErr(providersdk.IsUnreachable, "signed by an unknown authority; set spec.connection.caBundle", ""),
	}, {
		name: "insecureSkipTLSVerify connects without a CA bundle",
		edit: func(i *providersdk.ProviderInfo) {
			i.CABundle = nil
			i.Provider.Spec.Connection.InsecureSkipTLSVerify = ptr.To(true)
		},
		check: wantErr(nil, "", ""),
	}, {
		name: "a closed port is Unreachable, saying the connection was refused",
		edit: func(i *providersdk.ProviderInfo) {
			i.Provider.Spec.Connection.Endpoint = "https://127.0.0.1:1/api2/json"
		},
		check: wantErr(providersdk.IsUnreachable, "refused the connection", ""),
	}, {
		name:  "an http endpoint is Permanent",
		edit:  func(i *providersdk.ProviderInfo) { i.Provider.Spec.Connection.Endpoint = "http://127.0.0.1:8006" },
		check: wantErr(providersdk.IsPermanent, "must be an https URL", ""),
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
				if got := cl.(*session).cluster; got != proxmoxsim.ClusterName {
					t.Errorf("cluster = %q, want %q", got, proxmoxsim.ClusterName)
				}
				_ = cl.Disconnect(context.Background())
			}
		})
	}
}

func TestSessionSurvivesAnOutage(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, NewDriver())
	ctx := context.Background()

	sim.Down()
	if _, err := s.Inventory(ctx); !providersdk.IsUnreachable(err) {
		t.Fatalf("Inventory while the simulator is down = %v, want Unreachable", err)
	} else if !strings.Contains(err.Error(), "refused the connection") {
		t.Errorf("Unreachable message %q does not say the connection was refused", err)
	}
	if err := sim.Up(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inventory(ctx); err != nil {
		t.Fatalf("Inventory after the simulator is back: %v", err)
	}
}
