package host

import (
	"context"
	"fmt"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// SetCPUs runs n virtual CPUs in the running domain d, at most its <vcpu> maximum, and
// records n in its persistent definition (virDomainSetVcpusFlags, live and config):
// QEMU plugs the CPUs in, and the guest sees them in the same boot.
func (c *Client) SetCPUs(ctx context.Context, d *Domain, n uint) error {
	return c.do(ctx, "SetDomainCPUs", fmt.Sprintf("set the CPUs of running domain %s to %d", d.Name, n), func(l *libvirt.Libvirt) error {
		return l.DomainSetVcpusFlags(d.ref, uint32(n), uint32(libvirt.DomainVCPULive|libvirt.DomainVCPUConfig))
	})
}

// AddMemory plugs a DIMM of mib MiB into NUMA node 0 of the running domain d and adds
// it to its persistent definition (virDomainAttachDeviceFlags, live and config): the
// domain's memory grows by mib, which must fit in its <maxMemory> and a free slot.
func (c *Client) AddMemory(ctx context.Context, d *Domain, mib uint) error {
	dimm := libvirtxml.DomainMemorydev{
		Model: "dimm",
		Target: &libvirtxml.DomainMemorydevTarget{
			Size: &libvirtxml.DomainMemorydevTargetSize{Value: mib << 10, Unit: "KiB"},
			Node: &libvirtxml.DomainMemorydevTargetNode{Value: 0},
		},
	}
	x, err := dimm.Marshal()
	if err != nil {
		return fmt.Errorf("failed to render the DIMM: %w", err)
	}
	return c.do(ctx, "AddDomainMemory", fmt.Sprintf("plug %d MiB of memory into running domain %s", mib, d.Name), func(l *libvirt.Libvirt) error {
		return l.DomainAttachDeviceFlags(d.ref, x, uint32(libvirt.DomainDeviceModifyLive|libvirt.DomainDeviceModifyConfig))
	})
}
