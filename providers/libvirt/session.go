package libvirt

import (
	"context"
	"maps"
	"sync"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// Keys of the Provider's spec.parameters this driver reads.
const (
	// ParamPool is the storage pool of disks whose storage class names none; "default"
	// when unset.
	ParamPool = "pool"
	// ParamImagePool is the storage pool images are imported into; ParamPool's when unset.
	ParamImagePool = "imagePool"
	// ParamNetwork is the libvirt network of interfaces whose network class names
	// neither a network nor a bridge; "default" when unset.
	ParamNetwork = "network"
	// ParamFailureDomain names the host's failure domain; its host name when unset.
	ParamFailureDomain = "failureDomain"
	// ParamDomainType is the hypervisor domains run on: kvm or qemu (TCG, emulated).
	// The fastest the host offers when unset; qemu is for hosts whose KVM cannot run
	// the guests, e.g. some nested setups.
	ParamDomainType = "domainType"
)

// session is one Provider's libvirtd: the providersdk.Client of a Provider, which
// decides what its machines get and asks the host for it.
type session struct {
	driver *Driver
	host   *host.Client

	params map[string]string
	// hotplug is what new domains may grow while they run, and how far; hotplugErr
	// says why the Provider's hotplug parameters do not parse, which Inventory reports.
	hotplug        providersdk.Hotplug
	hotplugErr     error
	storageClasses []providersdk.ClassTarget
	networkClasses []providersdk.ClassTarget
	features       []string
	labels         map[string]string

	mu   sync.Mutex
	info *hostInfo

	imports *providersdk.Imports

	// claims serializes Adopt's read, write and read back of one domain's mark.
	claims domainLocks
}

var (
	_ providersdk.Client          = (*session)(nil)
	_ providersdk.InventoryReader = (*session)(nil)
	_ providersdk.ImageResolver   = (*session)(nil)
)

// newSession is the session of info's Provider on the connection h.
func newSession(d *Driver, h *host.Client, info providersdk.ProviderInfo) *session {
	p := info.Provider
	s := &session{
		driver:         d,
		host:           h,
		params:         maps.Clone(p.Spec.Parameters),
		storageClasses: info.StorageClasses(),
		networkClasses: info.NetworkClasses(),
		features:       p.Spec.Capabilities.Features,
		labels:         maps.Clone(p.Labels),
		imports:        providersdk.NewImports(d.now, providersdk.ImportLimitsFrom(p.Spec.Parameters)),
	}
	s.hotplug, s.hotplugErr = providersdk.HotplugFrom(p.Spec.Parameters)
	return s
}

// Disconnect stops the session's imports and closes its connections.
func (s *session) Disconnect(context.Context) error {
	s.imports.Stop()
	s.host.Close()
	return nil
}
