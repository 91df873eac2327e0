package nocloud

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNetworkConfig(t *testing.T) {
	tests := []struct {
		name   string
		ifaces []Interface
		want   map[string]any // the rendered document, decoded
	}{
		{name: "no interfaces is no network configuration"},
		{
			name: "a static interface and a DHCP one, each found by its MAC",
			ifaces: []Interface{
				{ID: "net0", MAC: "02:AB:CD:EF:01:02", Addresses: []string{"10.1.2.3/24", "fd00::3/64"}, Gateway4: "10.1.2.1", Gateway6: "fd00::1",
					Nameservers: []string{"10.1.0.53"}, MTU: 9000},
				{ID: "net1", MAC: "02:00:00:00:00:01", DHCP: true},
			},
			want: map[string]any{
				"version": 2.0,
				"ethernets": map[string]any{
					"net0": map[string]any{
						"match":       map[string]any{"macaddress": "02:ab:cd:ef:01:02"},
						"addresses":   []any{"10.1.2.3/24", "fd00::3/64"},
						"gateway4":    "10.1.2.1",
						"gateway6":    "fd00::1",
						"nameservers": map[string]any{"addresses": []any{"10.1.0.53"}},
						"mtu":         9000.0,
					},
					"net1": map[string]any{"match": map[string]any{"macaddress": "02:00:00:00:00:01"}, "dhcp4": true},
				},
			},
		},
		{
			name:   "an address that tries to add a key stays a string",
			ifaces: []Interface{{ID: "net0", MAC: "02:00:00:00:00:02", Addresses: []string{"10.0.0.1/8\"\ndhcp4: true"}}},
			want: map[string]any{
				"version":   2.0,
				"ethernets": map[string]any{"net0": map[string]any{"match": map[string]any{"macaddress": "02:00:00:00:00:02"}, "addresses": []any{"10.0.0.1/8\"\ndhcp4: true"}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := NetworkConfig(tt.ifaces)
			var got map[string]any
			if data != nil {
				if err := json.Unmarshal(data, &got); err != nil {
					t.Fatalf("network-config is not JSON (and so not YAML): %v\n%s", err, data)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("network-config (-want +got):\n%s", diff)
			}
		})
	}
}
