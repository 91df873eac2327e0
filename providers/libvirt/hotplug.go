package libvirt

import (
	"slices"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// The kinds of headroom a domain's banlieue metadata records (host.Metadata.Hotplug).
const (
	hotplugCPU    = "cpu"
	hotplugMemory = "memory"
)

// memorySlots is the room for DIMMs of a domain made with memory hotplug: each growth
// of its memory while it runs plugs one DIMM, and a resize while it is shut off folds
// them into its memory (host.Reconfigure). A growth once all are taken waits for the
// next power cycle, which makes it that way and frees them. QEMU takes up to 256 on
// x86; a slot costs the guest no memory.
const memorySlots = 16

// hotplugKinds names what hot lets a domain grow while it runs, for its metadata.
func hotplugKinds(hot providersdk.Hotplug) []string {
	var out []string
	if hot.CPU {
		out = append(out, hotplugCPU)
	}
	if hot.Memory {
		out = append(out, hotplugMemory)
	}
	return out
}

// domainHotplug is the headroom dom gets when it is resized while shut off: what it
// was created to grow while it runs, as its metadata records (a domain made before
// the Provider's hotplug parameter was set, or adopted, has none), bounded by the
// Provider's maxima as they are now.
func (s *session) domainHotplug(dom *host.Domain) providersdk.Hotplug {
	var kinds []string
	if dom.Metadata != nil {
		kinds = dom.Metadata.Hotplug
	}
	return providersdk.Hotplug{
		CPU:          slices.Contains(kinds, hotplugCPU),
		Memory:       slices.Contains(kinds, hotplugMemory),
		MaxCPUs:      s.hotplug.MaxCPUs,
		MaxMemoryMiB: s.hotplug.MaxMemoryMiB,
	}
}

// onlineChange reports whether libvirt makes c while the domain runs, which Update
// then does and Observe never reports pending: a disk grows through QEMU; CPUs grow up
// to the <vcpu> maximum; memory grows by a DIMM within <maxMemory> while a slot is
// free. Anything else (a decrease, a growth beyond the maxima, a new disk) waits for
// the domain to be shut off.
func onlineChange(dom *host.Domain, c providersdk.HardwareChange) bool {
	if powerState(dom) != banlieuev1.PowerStatePoweredOn || dom.State != host.StateRunning {
		return false
	}
	switch c.Kind {
	case providersdk.ChangeDiskGrow:
		return true
	case providersdk.ChangeCPUs:
		return c.Increase() && c.To <= int64(dom.MaxCPUs)
	case providersdk.ChangeMemory:
		return c.Increase() && memoryPluggable(dom, c.To-c.From) && c.To <= int64(dom.MaxMemoryMiB)
	}
	return false
}

// memoryPluggable reports whether a DIMM of mib MiB plugs into dom: it has a
// <maxMemory>, a free slot, and a NUMA cell, and mib is a multiple of the DIMM
// alignment of its architecture.
func memoryPluggable(dom *host.Domain, mib int64) bool {
	return dom.MaxMemoryMiB > 0 && dom.NUMACells > 0 && uint(dom.MemoryDevices) < dom.MemorySlots &&
		mib > 0 && mib%dimmAlignMiB(dom.Arch) == 0
}

// dimmAlignMiB is what the size of a DIMM of a domain of arch must be a multiple of:
// 2 MiB, as QEMU's memory backends are aligned on x86_64 ("backend memory size must be
// multiple of 0x200000"), and 256 MiB on ppc64, which libvirt rounds DIMMs up to.
func dimmAlignMiB(arch string) int64 {
	if arch == "ppc64" || arch == "ppc64le" {
		return 256
	}
	return 2
}
