package pve

import (
	"strings"
	"testing"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestPathTemplate(t *testing.T) {
	tests := map[string]string{
		"/cluster/resources":                                      "/cluster/resources",
		"/nodes/pve1/qemu/101/config":                             "/nodes/{node}/qemu/{vmid}/config",
		"/nodes/pve1/tasks/UPID:pve1:0001:x:/status":              "/nodes/{node}/tasks/{upid}/status",
		"/nodes/pve1/storage/local/content/local:snippets/a.yaml": "/nodes/{node}/storage/{storage}/content/{volume}",
		"/nodes/pve2/qemu/101/agent/network-get-interfaces":       "/nodes/{node}/qemu/{vmid}/agent/{command}",
		"/storage/local":                                          "/storage/local",
	}
	for path, want := range tests {
		if got := pathTemplate(path); got != want {
			t.Errorf("pathTemplate(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestEndpointURL(t *testing.T) {
	tests := []struct{ name, endpoint, want, wantErr string }{
		{name: "a bare host gets https, port 8006 and /api2/json", endpoint: "pve.example.com", want: "https://pve.example.com:8006/api2/json"},
		{name: "an empty port is port 8006", endpoint: "https://pve.example.com:", want: "https://pve.example.com:8006/api2/json"},
		{name: "an IPv6 address gets port 8006 in brackets", endpoint: "https://[2001:db8::1]", want: "https://[2001:db8::1]:8006/api2/json"},
		{name: "trailing slashes are dropped", endpoint: "https://pve:8006//", want: "https://pve:8006/api2/json"},
		{name: "credentials, a query and a fragment are dropped", endpoint: "https://root:pw@pve:8006/api2/json?x=1#y", want: "https://pve:8006/api2/json"},
		{name: "a colon alone is refused", endpoint: ":", wantErr: `spec.connection.endpoint "https://:" is not a Proxmox VE URL`},
		{name: "http is refused", endpoint: "http://pve", wantErr: "must be an https URL"},
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
