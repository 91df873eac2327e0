package nocloud_test

import (
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestMachineSeed(t *testing.T) {
	static := func(addrs ...string) *banlieuev1.IPAM {
		return &banlieuev1.IPAM{Source: banlieuev1.IPAMSourceStatic, Static: banlieuev1.StaticIPAM{Addresses: addrs, Gateway: "198.18.0.1"}}
	}
	tests := []struct {
		name       string
		ifaces     []infrav1.MachineInterface
		wantMACs   int
		wantConfig []string // substrings of network-config; none means no network-config
		wantErr    string
	}{
		{name: "no interfaces: no network-config, the backend's MACs", ifaces: nil},
		{name: "DHCP only: cloud-init's fallback, the backend's MACs", ifaces: []infrav1.MachineInterface{{Name: "eth0"}}},
		{
			name:       "a static interface names every NIC by its MAC",
			ifaces:     []infrav1.MachineInterface{{Name: "eth0", IPAM: static("198.18.0.4/24")}, {Name: "eth1"}},
			wantMACs:   2,
			wantConfig: []string{`"addresses": [`, `"198.18.0.4/24"`, `"gateway4": "198.18.0.1"`, `"dhcp4": true`, `"macaddress": "02:`},
		},
		{
			name:    "an address that is not CIDR is refused",
			ifaces:  []infrav1.MachineInterface{{Name: "eth0", IPAM: static("198.18.0.4")}},
			wantErr: `address "198.18.0.4" is not in CIDR notation`,
		},
		{
			name:    "a pool the core did not resolve is refused",
			ifaces:  []infrav1.MachineInterface{{Name: "eth0", IPAM: &banlieuev1.IPAM{Source: banlieuev1.IPAMSourcePool}}, {Name: "eth1", IPAM: static("198.18.0.4/24")}},
			wantErr: "IPAM source pool is not supported",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &providersdk.Machine{UserData: []byte("#cloud-config\n")}
			m.UID, m.Name = k8stypes.UID("6b1f3c1e-5a0e-4c7e-9a53-0d7f1c2b3a4d"), "web-1"
			m.Spec.Interfaces = tt.ifaces
			seed, err := nocloud.MachineSeed(m)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			macs := nocloud.MachineMACs(m)
			if len(macs) != tt.wantMACs {
				t.Fatalf("%d MACs, want %d", len(macs), tt.wantMACs)
			}
			if again := nocloud.MachineMACs(m); strings.Join(again, ",") != strings.Join(macs, ",") {
				t.Errorf("MACs changed between calls: %v then %v", macs, again)
			}
			if len(macs) == 2 && macs[0] == macs[1] {
				t.Errorf("two NICs share MAC %s", macs[0])
			}
			for _, mac := range macs {
				if !strings.Contains(string(seed.NetworkConfig), strings.ToLower(mac)) {
					t.Errorf("network-config does not name %s:\n%s", mac, seed.NetworkConfig)
				}
			}
			if len(tt.wantConfig) == 0 && seed.NetworkConfig != nil {
				t.Errorf("unexpected network-config:\n%s", seed.NetworkConfig)
			}
			for _, want := range tt.wantConfig {
				if !strings.Contains(string(seed.NetworkConfig), want) {
					t.Errorf("network-config lacks %s:\n%s", want, seed.NetworkConfig)
				}
			}
			if seed.InstanceID != string(m.UID) || seed.Hostname != "web-1" || string(seed.UserData) != "#cloud-config\n" {
				t.Errorf("seed %+v: want the machine's UID, name and user data", seed)
			}
		})
	}
}
