package nocloud

import (
	"encoding/json"
	"strings"
)

// Interface is one NIC of a guest's network configuration, found by its MAC address.
type Interface struct {
	// ID names the NIC in the configuration (e.g. net0); the guest keeps its own name
	// for the device.
	ID string
	// MAC is the NIC's MAC address, by which the guest finds it.
	MAC string
	// DHCP configures the NIC's IPv4 address by DHCP; Addresses are then ignored.
	DHCP bool
	// Addresses are static addresses in CIDR notation.
	Addresses []string
	// Gateway4 and Gateway6 are the default gateways, when the NIC has them.
	Gateway4, Gateway6 string
	// Nameservers are DNS servers' addresses.
	Nameservers []string
	// MTU is the link's MTU; the guest's default when zero.
	MTU int
}

// netplan v2, as cloud-init reads it from network-config.
type (
	networkV2 struct {
		Version   int                   `json:"version"`
		Ethernets map[string]ethernetV2 `json:"ethernets"`
	}
	ethernetV2 struct {
		Match       matchV2       `json:"match"`
		DHCP4       bool          `json:"dhcp4,omitempty"`
		Addresses   []string      `json:"addresses,omitempty"`
		Gateway4    string        `json:"gateway4,omitempty"`
		Gateway6    string        `json:"gateway6,omitempty"`
		Nameservers *nameserverV2 `json:"nameservers,omitempty"`
		MTU         int           `json:"mtu,omitempty"`
	}
	matchV2 struct {
		MACAddress string `json:"macaddress"`
	}
	nameserverV2 struct {
		Addresses []string `json:"addresses"`
	}
)

// NetworkConfig renders the interfaces as cloud-init's network configuration version
// 2 (netplan's), for the seed's network-config; nil for no interfaces. It is JSON,
// which is YAML too, so no value can add keys.
func NetworkConfig(ifaces []Interface) []byte {
	if len(ifaces) == 0 {
		return nil
	}
	cfg := networkV2{Version: 2, Ethernets: map[string]ethernetV2{}}
	for _, i := range ifaces {
		e := ethernetV2{Match: matchV2{MACAddress: strings.ToLower(i.MAC)}, MTU: i.MTU}
		if i.DHCP {
			e.DHCP4 = true
		} else {
			// gateway4 and gateway6, which netplan deprecates for routes "to: default":
			// cloud-init refused those until 2025 (bookworm's 22.4 fails its network
			// stage), and its ifupdown renderer makes a route to ::/0 one to ::/64.
			// Every cloud-init and netplan reads gateway4 and gateway6.
			e.Addresses, e.Gateway4, e.Gateway6 = i.Addresses, i.Gateway4, i.Gateway6
		}
		if len(i.Nameservers) > 0 {
			e.Nameservers = &nameserverV2{Addresses: i.Nameservers}
		}
		cfg.Ethernets[i.ID] = e
	}
	data, _ := json.MarshalIndent(cfg, "", "  ") // only strings, ints and bools: it cannot fail
	return append(data, '\n')
}
