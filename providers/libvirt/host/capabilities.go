package host

import (
	"context"
	"runtime"
	"slices"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// Capabilities is what a host offers new domains.
type Capabilities struct {
	// Hostname is the host's name.
	Hostname string
	// Arch is the guest architecture new domains get: the host's own.
	Arch string
	// DomainType is the hypervisor new domains run on: kvm, qemu (TCG) or test.
	DomainType string
	// NestedVirtualization is true when the host runs KVM on a CPU with vmx or svm.
	NestedVirtualization bool
	// EFI is true when the domain capabilities offer UEFI firmware.
	EFI bool
	// SecureBoot is true when that UEFI firmware offers Secure Boot.
	SecureBoot bool
}

// Capabilities reads the host's name and what it offers domains. domainType, when not
// empty, is the only hypervisor to choose; else the fastest: KVM over TCG over others.
func (c *Client) Capabilities(ctx context.Context, domainType string) (*Capabilities, error) {
	return call(ctx, c, "GetCapabilities", "read the host's capabilities", func(l *libvirt.Libvirt) (*Capabilities, error) {
		h := &Capabilities{}
		var err error
		if h.Hostname, err = l.ConnectGetHostname(); err != nil {
			return nil, err
		}
		x, err := l.ConnectGetCapabilities()
		if err != nil {
			return nil, err
		}
		caps := &libvirtxml.Caps{}
		if err := caps.Unmarshal(x); err != nil {
			return nil, err
		}
		h.Arch, h.DomainType = guestType(caps, domainType)
		if h.DomainType == "kvm" && caps.Host.CPU != nil {
			h.NestedVirtualization = slices.ContainsFunc(caps.Host.CPU.FeatureFlags, func(f libvirtxml.CapsHostCPUFeatureFlag) bool {
				return f.Name == "vmx" || f.Name == "svm"
			})
		}
		if h.DomainType == "kvm" || h.DomainType == "qemu" {
			dx, err := l.ConnectGetDomainCapabilities(nil, libvirt.OptString{h.Arch}, libvirt.OptString{"q35"}, libvirt.OptString{h.DomainType}, 0)
			if err == nil {
				h.EFI, h.SecureBoot = firmware(dx)
			}
		}
		return h, nil
	})
}

// guestType picks the architecture and hypervisor for new domains: the host's own
// architecture (x86_64 when it offers none), and KVM over TCG over anything else.
func guestType(caps *libvirtxml.Caps, only string) (arch, domainType string) {
	want := ""
	if caps.Host.CPU != nil {
		want = caps.Host.CPU.Arch
	}
	if want == "" {
		want = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	}
	rank := map[string]int{"kvm": 3, "qemu": 2}
	for _, anyArch := range []bool{false, true} {
		best := -1
		for _, g := range caps.Guests {
			if g.OSType != "hvm" || (!anyArch && g.Arch.Name != want) {
				continue
			}
			for _, d := range g.Arch.Domains {
				if only != "" && d.Type != only {
					continue
				}
				if r := rank[d.Type]; r > best {
					arch, domainType, best = g.Arch.Name, d.Type, r
				}
			}
		}
		if best >= 0 {
			break
		}
	}
	return arch, domainType
}

// firmware reads UEFI and Secure Boot support from domain capabilities.
func firmware(x string) (efi, secureBoot bool) {
	dc := &libvirtxml.DomainCaps{}
	if err := dc.Unmarshal(x); err != nil || dc.OS == nil || dc.OS.Supported != "yes" {
		return false, false
	}
	for _, e := range dc.OS.Enums {
		if e.Name == "firmware" && slices.Contains(e.Values, "efi") {
			efi = true
		}
	}
	if l := dc.OS.Loader; efi && l != nil && l.Supported == "yes" {
		for _, e := range l.Enums {
			if e.Name == "secure" && slices.Contains(e.Values, "yes") {
				secureBoot = true
			}
		}
	}
	return efi, secureBoot
}

// Targets are the host's objects that classes name.
type Targets struct {
	// Pools are the active storage pools' names.
	Pools []string
	// Networks are the active libvirt networks' names.
	Networks []string
	// Interfaces are the host's active interfaces (bridges among them), as libvirt's
	// interface driver lists them.
	Interfaces []string
	// InterfacesKnown is false when the host has no interface driver, so that
	// Interfaces says nothing.
	InterfacesKnown bool
}

// Targets lists the host's active storage pools, networks and interfaces.
func (c *Client) Targets(ctx context.Context) (*Targets, error) {
	return call(ctx, c, "ListPoolsAndNetworks", "list the host's storage pools and networks", func(l *libvirt.Libvirt) (*Targets, error) {
		t := &Targets{}
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return nil, err
		}
		for _, p := range pools {
			t.Pools = append(t.Pools, p.Name)
		}
		nets, _, err := l.ConnectListAllNetworks(1, libvirt.ConnectListNetworksActive)
		switch {
		case isCode(err, libvirt.ErrNoSupport):
			// A driver without networks (e.g. without the network driver) has none.
		case err != nil:
			return nil, err
		}
		for _, n := range nets {
			t.Networks = append(t.Networks, n.Name)
		}
		ifs, _, err := l.ConnectListAllInterfaces(1, libvirt.ConnectListInterfacesActive)
		if err == nil {
			t.InterfacesKnown = true
			for _, i := range ifs {
				t.Interfaces = append(t.Interfaces, i.Name)
			}
		}
		return t, nil
	})
}
