package libvirt

import (
	"context"
	"runtime"
	"slices"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Feature names this driver reports in the failure domain.
const (
	// FeatureEFI is UEFI firmware for guests (OVMF), found in the domain capabilities.
	FeatureEFI = "efi"
	// FeatureEFISecureBoot is UEFI firmware with Secure Boot.
	FeatureEFISecureBoot = "efiSecureBoot"
	// FeatureNestedVirtualization is KVM with a CPU that exposes vmx or svm to guests.
	FeatureNestedVirtualization = "nestedVirtualization"
)

// Keys of class targets.
const (
	// TargetPool names a storage pool in a storage class target.
	TargetPool = "pool"
	// TargetNetwork names a libvirt network in a network class target.
	TargetNetwork = "network"
	// TargetBridge names a host bridge in a network class target.
	TargetBridge = "bridge"
)

// checkedFeatures are the features this driver detects; other features the Provider
// declares are passed through.
var checkedFeatures = []string{FeatureEFI, FeatureEFISecureBoot, FeatureNestedVirtualization}

// hostInfo is what the session learns of its host once.
type hostInfo struct {
	hostname   string
	domainType string
	arch       string
	features   []string
	// failureDomain is the host's failure domain's name.
	failureDomain string
	// idHost is the host in providerIDs: the endpoint's host, or the host name.
	idHost string
}

// hostInfo returns what the host is, reading it on first use.
func (s *session) hostInfo(ctx context.Context) (*hostInfo, error) {
	s.mu.Lock()
	h := s.host
	s.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h = &hostInfo{}
	err := s.do(ctx, "GetCapabilities", "read the host's capabilities", func(l *libvirt.Libvirt) error {
		var err error
		if h.hostname, err = l.ConnectGetHostname(); err != nil {
			return err
		}
		x, err := l.ConnectGetCapabilities()
		if err != nil {
			return err
		}
		caps := &libvirtxml.Caps{}
		if err := caps.Unmarshal(x); err != nil {
			return err
		}
		h.arch, h.domainType = guestType(caps, s.params[ParamDomainType])
		if h.domainType == "kvm" && caps.Host.CPU != nil {
			for _, f := range caps.Host.CPU.FeatureFlags {
				if (f.Name == "vmx" || f.Name == "svm") && !slices.Contains(h.features, FeatureNestedVirtualization) {
					h.features = append(h.features, FeatureNestedVirtualization)
				}
			}
		}
		if h.domainType == "kvm" || h.domainType == "qemu" {
			dx, err := l.ConnectGetDomainCapabilities(nil, libvirt.OptString{h.arch}, libvirt.OptString{"q35"}, libvirt.OptString{h.domainType}, 0)
			if err == nil {
				h.features = append(h.features, firmwareFeatures(dx)...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.failureDomain = s.params[ParamFailureDomain]
	if h.failureDomain == "" {
		h.failureDomain = providersdk.DNSLabel(h.hostname, "localhost")
	}
	h.idHost = s.ep.host
	if h.idHost == "" {
		h.idHost = h.hostname
	}
	s.mu.Lock()
	s.host = h
	s.mu.Unlock()
	return h, nil
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

// firmwareFeatures reads UEFI and Secure Boot support from domain capabilities.
func firmwareFeatures(x string) []string {
	dc := &libvirtxml.DomainCaps{}
	if err := dc.Unmarshal(x); err != nil || dc.OS == nil || dc.OS.Supported != "yes" {
		return nil
	}
	var out []string
	for _, e := range dc.OS.Enums {
		if e.Name == "firmware" && slices.Contains(e.Values, "efi") {
			out = append(out, FeatureEFI)
		}
	}
	if l := dc.OS.Loader; l != nil && l.Supported == "yes" {
		for _, e := range l.Enums {
			if e.Name == "secure" && slices.Contains(e.Values, "yes") && slices.Contains(out, FeatureEFI) {
				out = append(out, FeatureEFISecureBoot)
			}
		}
	}
	return out
}

// Inventory reports the host as one failure domain with the storage pools and networks
// of the Provider's classes that exist and are active there.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	attrs := banlieuev1.FailureDomainAttributes{
		AvailableStorageClasses: []string{},
		AvailableNetworkClasses: []string{},
		Features:                slices.Clone(h.features),
		Raw:                     map[string]string{"hostname": h.hostname, "uri": s.ep.safe, "domainType": h.domainType, "arch": h.arch},
	}
	err = s.do(ctx, "ListPoolsAndNetworks", "list the host's storage pools and networks", func(l *libvirt.Libvirt) error {
		pools, err := activeNames(l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive))
		if err != nil {
			return err
		}
		nets, err := activeNetworks(l)
		if err != nil {
			return err
		}
		bridges, bridgesKnown := hostBridges(l)
		for _, c := range s.storageClasses {
			if name, ok := c.target[TargetPool]; !ok || slices.Contains(pools, name) {
				attrs.AvailableStorageClasses = append(attrs.AvailableStorageClasses, c.name)
			}
		}
		for _, c := range s.networkClasses {
			n, isNet := c.target[TargetNetwork]
			b, isBridge := c.target[TargetBridge]
			switch {
			case isNet && !slices.Contains(nets, n):
			case !isNet && isBridge && bridgesKnown && !slices.Contains(bridges, b):
			default:
				attrs.AvailableNetworkClasses = append(attrs.AvailableNetworkClasses, c.name)
			}
		}
		return nil
	})
	if err != nil {
		return providersdk.Inventory{}, err
	}
	for _, f := range s.features {
		if !slices.Contains(checkedFeatures, f) && !slices.Contains(attrs.Features, f) {
			attrs.Features = append(attrs.Features, f)
		}
	}
	labels := map[string]string{}
	for k, v := range s.labels {
		labels[k] = v
	}
	labels["host"] = providersdk.LabelValue(h.hostname)
	return providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{{Name: h.failureDomain, Labels: labels, Attributes: attrs}}}, nil
}

// activeNames returns the names of the pools a list call returned.
func activeNames(pools []libvirt.StoragePool, _ uint32, err error) ([]string, error) {
	var out []string
	for _, p := range pools {
		out = append(out, p.Name)
	}
	return out, err
}

// activeNetworks lists the names of the active libvirt networks.
func activeNetworks(l *libvirt.Libvirt) ([]string, error) {
	nets, _, err := l.ConnectListAllNetworks(1, libvirt.ConnectListNetworksActive)
	if err != nil {
		if isCode(err, libvirt.ErrNoSupport) {
			return nil, nil // a driver without networks (e.g. without the network driver)
		}
		return nil, err
	}
	var out []string
	for _, n := range nets {
		out = append(out, n.Name)
	}
	return out, nil
}

// hostBridges lists the host's active interfaces through libvirt's interface driver;
// known is false when the host has none, and bridges are then taken on trust.
func hostBridges(l *libvirt.Libvirt) (names []string, known bool) {
	ifs, _, err := l.ConnectListAllInterfaces(1, libvirt.ConnectListInterfacesActive)
	if err != nil {
		return nil, false
	}
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return names, true
}
