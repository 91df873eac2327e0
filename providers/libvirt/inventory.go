package libvirt

import (
	"context"
	"maps"
	"slices"

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
	// kvmRefused is QEMU's refusal of KVM when libvirt offered it but QEMU could not
	// use it, so that domainType fell back to TCG; "" otherwise.
	kvmRefused string
}

// hostInfo returns what the host is, reading it on first use.
func (s *session) hostInfo(ctx context.Context) (*hostInfo, error) {
	s.mu.Lock()
	h := s.info
	s.mu.Unlock()
	if h != nil {
		return h, nil
	}
	caps, err := s.host.Capabilities(ctx, s.params[ParamDomainType])
	if err != nil {
		return nil, err
	}
	h = &hostInfo{hostname: caps.Hostname, domainType: caps.DomainType, arch: caps.Arch}
	for _, f := range []struct {
		name string
		has  bool
	}{
		{FeatureNestedVirtualization, caps.NestedVirtualization},
		{FeatureEFI, caps.EFI},
		{FeatureEFISecureBoot, caps.SecureBoot},
	} {
		if f.has {
			h.features = append(h.features, f.name)
		}
	}
	h.failureDomain = s.params[ParamFailureDomain]
	if h.failureDomain == "" {
		h.failureDomain = providersdk.DNSLabel(h.hostname, "localhost")
	}
	h.idHost = s.host.RemoteHost()
	if h.idHost == "" {
		h.idHost = h.hostname
	}
	s.mu.Lock()
	s.info = h
	s.mu.Unlock()
	return h, nil
}

// Inventory reports the host as one failure domain with the storage pools and networks
// of the Provider's classes that exist and are active there. Hotplug parameters it
// cannot use are its error, which keeps the Provider from Ready.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	if s.hotplugErr != nil {
		return providersdk.Inventory{}, s.hotplugErr
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	t, err := s.host.Targets(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	attrs := banlieuev1.FailureDomainAttributes{
		// A class that names no pool, or neither a network nor a bridge, uses the
		// Provider's defaults, which are taken on trust; so is a bridge on a host
		// without libvirt's interface driver.
		AvailableStorageClasses: providersdk.AvailableClasses(s.storageClasses, func(target map[string]string) bool {
			name, ok := target[TargetPool]
			return !ok || slices.Contains(t.Pools, name)
		}),
		AvailableNetworkClasses: providersdk.AvailableClasses(s.networkClasses, func(target map[string]string) bool {
			if n, ok := target[TargetNetwork]; ok {
				return slices.Contains(t.Networks, n)
			}
			b, ok := target[TargetBridge]
			return !ok || !t.InterfacesKnown || slices.Contains(t.Interfaces, b)
		}),
		Features: slices.Clone(h.features),
		Raw:      map[string]string{"hostname": h.hostname, "uri": s.host.URI(), "domainType": h.domainType, "arch": h.arch},
	}
	if h.kvmRefused != "" {
		attrs.Raw["kvmRefused"] = h.kvmRefused
	}
	for _, f := range s.features {
		if !slices.Contains(checkedFeatures, f) && !slices.Contains(attrs.Features, f) {
			attrs.Features = append(attrs.Features, f)
		}
	}
	labels := maps.Clone(s.labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["host"] = providersdk.LabelValue(h.hostname)
	return providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{{Name: h.failureDomain, Labels: labels, Attributes: attrs}}}, nil
}
