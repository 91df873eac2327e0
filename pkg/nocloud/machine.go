package nocloud

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Addressing is an interface's IP configuration as its IPAM gives it, which the seed's
// network-config renders (and a backend's own cloud-init settings, such as PVE's
// ipconfigN, may too).
type Addressing struct {
	// DHCP configures the interface by DHCP; the other fields are then empty.
	DHCP bool
	// Addresses are the static addresses.
	Addresses []netip.Prefix
	// Gateway is the default gateway; not valid when there is none.
	Gateway netip.Addr
	// Nameservers are DNS servers' addresses.
	Nameservers []string
}

// HasStaticIPAM reports whether an interface's addresses are static.
func HasStaticIPAM(iface infrav1.MachineInterface) bool {
	return iface.IPAM != nil && iface.IPAM.Source == banlieuev1.IPAMSourceStatic
}

// AddressingOf reads an interface's IPAM: DHCP unless it is static. Another source (an
// address pool, which core resolves to static before a provider sees it) is a
// permanent error.
func AddressingOf(iface infrav1.MachineInterface) (Addressing, error) {
	if iface.IPAM == nil || iface.IPAM.Source == "" || iface.IPAM.Source == banlieuev1.IPAMSourceDHCP {
		return Addressing{DHCP: true}, nil
	}
	if !HasStaticIPAM(iface) || !iface.IPAM.Static.IsDefined() {
		return Addressing{}, providersdk.Permanent(infrav1.MachineFailedReason,
			"interface %q: IPAM source %s is not supported by this provider; use dhcp or static", iface.Name, iface.IPAM.Source)
	}
	st := iface.IPAM.Static
	a := Addressing{Nameservers: st.Nameservers}
	a.Gateway, _ = netip.ParseAddr(st.Gateway)
	for _, s := range st.Addresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Addressing{}, providersdk.Permanent(infrav1.MachineFailedReason, "interface %q: address %q is not in CIDR notation", iface.Name, s)
		}
		a.Addresses = append(a.Addresses, p)
	}
	return a, nil
}

// MachineMACs are the MACs of the machine's NICs when its seed has a network-config
// (an interface with static IPAM): the seed, written before the VM is made, finds each
// NIC by its MAC, so NIC i gets a locally administered unicast MAC made from the
// machine's UID and i, the same on every call (a create retried after a crash writes
// the same seed). nil otherwise: the NICs keep the MACs the backend gives them.
func MachineMACs(m *providersdk.Machine) []string {
	if !slices.ContainsFunc(m.Spec.Interfaces, HasStaticIPAM) {
		return nil
	}
	macs := make([]string, len(m.Spec.Interfaces))
	for i := range macs {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/net%d", m.UID, i))
		// 0x02: locally administered and unicast, as PVE and libvirt require of a NIC's MAC.
		macs[i] = fmt.Sprintf("02:%02X:%02X:%02X:%02X:%02X", sum[0], sum[1], sum[2], sum[3], sum[4])
	}
	return macs
}

// MachineSeed is the machine's NoCloud seed: its user data, meta-data naming its UID
// and host name, and a network-config when an interface has static IPAM, each NIC found
// by the MAC MachineMACs gives it (without one, the guest configures its first NIC by
// DHCP, cloud-init's fallback).
func MachineSeed(m *providersdk.Machine) (Seed, error) {
	seed := Seed{UserData: m.UserData, InstanceID: string(m.UID), Hostname: Hostname(m.Name)}
	macs := MachineMACs(m)
	if macs == nil {
		return seed, nil
	}
	ifaces := make([]Interface, 0, len(m.Spec.Interfaces))
	for i, iface := range m.Spec.Interfaces {
		a, err := AddressingOf(iface)
		if err != nil {
			return Seed{}, err
		}
		ni := Interface{ID: "net" + strconv.Itoa(i), MAC: macs[i], DHCP: a.DHCP, Nameservers: a.Nameservers, MTU: int(iface.MTU)}
		for _, p := range a.Addresses {
			ni.Addresses = append(ni.Addresses, p.String())
		}
		switch {
		case a.Gateway.Is4():
			ni.Gateway4 = a.Gateway.String()
		case a.Gateway.Is6():
			ni.Gateway6 = a.Gateway.String()
		}
		ifaces = append(ifaces, ni)
	}
	seed.NetworkConfig = NetworkConfig(ifaces)
	return seed, nil
}
