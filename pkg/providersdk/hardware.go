package providersdk

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// GiB is a gibibyte in bytes.
const GiB = int64(1) << 30

// Hardware is a VM's shape as its backend reports it, for HardwareDiff.
type Hardware struct {
	// CPUs is the VM's virtual CPU count.
	CPUs int32
	// MemoryMiB is the VM's memory in MiB.
	MemoryMiB int64
	// DiskBytes are the sizes of the VM's disks in bus order; 0 where a size is unknown.
	DiskBytes []int64
}

// Observed is h as a status reports it: disk sizes in GiB, rounded up.
func (h Hardware) Observed() banlieuev1.ObservedHardware {
	out := banlieuev1.ObservedHardware{CPUs: h.CPUs, MemoryMiB: h.MemoryMiB}
	for _, b := range h.DiskBytes {
		out.DiskSizesGiB = append(out.DiskSizesGiB, (b+GiB-1)/GiB)
	}
	return out
}

// ChangeKind is what a HardwareChange changes.
type ChangeKind string

// The kinds of hardware change.
const (
	// ChangeCPUs changes the virtual CPU count.
	ChangeCPUs ChangeKind = "CPUs"
	// ChangeMemory changes the memory size.
	ChangeMemory ChangeKind = "Memory"
	// ChangeDiskGrow grows an existing disk.
	ChangeDiskGrow ChangeKind = "DiskGrow"
	// ChangeDiskAdd adds a disk the VM does not have.
	ChangeDiskAdd ChangeKind = "DiskAdd"
	// ChangeDiskShrink asks an existing disk to shrink, which no backend does.
	ChangeDiskShrink ChangeKind = "DiskShrink"
)

// HardwareChange is one difference between a VM's hardware and its machine's spec.
type HardwareChange struct {
	// Kind is what changes.
	Kind ChangeKind
	// Disk is the index in spec.disks of a disk change; -1 for CPUs and memory.
	Disk int
	// From and To are the VM's value and the spec's: a CPU count, MiB of memory, or a
	// disk's bytes (From is 0 for a disk to add).
	From, To int64
	// What names the disk of a disk change, e.g. "disk \"data\"".
	What string
}

// Increase reports whether the change makes the VM larger.
func (c HardwareChange) Increase() bool { return c.To > c.From }

// String describes the change for a message, e.g. "CPUs from 2 to 4".
func (c HardwareChange) String() string {
	switch c.Kind {
	case ChangeCPUs:
		return fmt.Sprintf("CPUs from %d to %d", c.From, c.To)
	case ChangeMemory:
		return fmt.Sprintf("memory from %d MiB to %d MiB", c.From, c.To)
	case ChangeDiskAdd:
		return "adding " + c.What
	case ChangeDiskGrow:
		return fmt.Sprintf("growing %s from %s to %s", c.What, GiBString(c.From), GiBString(c.To))
	}
	return fmt.Sprintf("%s is %s and cannot shrink to %s", c.What, GiBString(c.From), GiBString(c.To))
}

// HardwareDiff lists how a VM's hardware, as the backend reports it, differs from the
// machine's spec: CPUs and memory where the spec sets them, then the disks matched by
// position (spec.disks[i] is the VM's i-th disk in bus order). A disk the VM lacks is
// added, a larger one grows, a smaller one is a ChangeDiskShrink; a disk whose size is
// unknown is not compared, and disks beyond the spec's are left alone. Which changes a
// backend can make, and whether online, is the driver's policy.
func HardwareDiff(spec infrav1.MachineSpec, have Hardware) []HardwareChange {
	var out []HardwareChange
	hw := spec.Hardware
	if hw.CPUs > 0 && hw.CPUs != have.CPUs {
		out = append(out, HardwareChange{Kind: ChangeCPUs, Disk: -1, From: int64(have.CPUs), To: int64(hw.CPUs)})
	}
	if hw.MemoryMiB > 0 && hw.MemoryMiB != have.MemoryMiB {
		out = append(out, HardwareChange{Kind: ChangeMemory, Disk: -1, From: have.MemoryMiB, To: hw.MemoryMiB})
	}
	for i, d := range spec.Disks {
		want := int64(d.SizeGiB) * GiB
		what := fmt.Sprintf("disk %q", d.Name)
		switch {
		case i >= len(have.DiskBytes):
			out = append(out, HardwareChange{Kind: ChangeDiskAdd, Disk: i, To: want, What: what})
		case want <= 0 || have.DiskBytes[i] <= 0:
		case want > have.DiskBytes[i]:
			out = append(out, HardwareChange{Kind: ChangeDiskGrow, Disk: i, From: have.DiskBytes[i], To: want, What: what})
		case want < have.DiskBytes[i]:
			out = append(out, HardwareChange{Kind: ChangeDiskShrink, Disk: i, From: have.DiskBytes[i], To: want, What: what})
		}
	}
	return out
}

// DescribeChanges joins change descriptions for a message: "a", "a and b", "a, b and c".
func DescribeChanges(changes []HardwareChange) string { return JoinPhrases(Descriptions(changes)) }

// JoinPhrases joins phrases for a message as a sentence lists them: "a", "a and b",
// "a, b and c"; "" for none. DescribeChanges uses it; a driver whose message mixes the
// kit's changes with its own (a firmware, a machine type) joins them with it too.
func JoinPhrases(phrases []string) string {
	switch len(phrases) {
	case 0:
		return ""
	case 1:
		return phrases[0]
	}
	return strings.Join(phrases[:len(phrases)-1], ", ") + " and " + phrases[len(phrases)-1]
}

// GiBString formats a byte count in whole GiB, rounded up, for a message: "20 GiB".
func GiBString(b int64) string { return fmt.Sprintf("%d GiB", (b+GiB-1)/GiB) }

// RefuseShrink returns a PermanentError with reason DiskShrinkNotSupported for the first
// shrink among changes, naming backend ("vSphere", "Proxmox VE"); nil when none shrinks.
func RefuseShrink(backend string, changes []HardwareChange) error {
	for _, c := range changes {
		if c.Kind == ChangeDiskShrink {
			return Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
				"%s on %s: disks only grow; give the VM class a disk at least that large", c, backend)
		}
	}
	return nil
}

// WaitsForRestart reports whether a change the backend makes only while the VM is off
// waits for the VM's next power cycle: the VM is not off (running or suspended), and
// its machine does not ask for it to be, so the driver will not power it off for the
// change. Otherwise the driver powers the VM off, when asked to, and makes the change
// before powering it on again.
func WaitsForRestart(have, want banlieuev1.PowerState) bool {
	return have != banlieuev1.PowerStatePoweredOff && want != banlieuev1.PowerStatePoweredOff
}

// PendingChanges returns the changes that wait for the VM's next power cycle, for
// Observation.PendingRestart: when WaitsForRestart(have, want), those online reports
// the backend cannot make now (nil online: none can); none otherwise. A shrink is never
// pending: it is refused (RefuseShrink).
func PendingChanges(changes []HardwareChange, have, want banlieuev1.PowerState, online func(HardwareChange) bool) []HardwareChange {
	if !WaitsForRestart(have, want) {
		return nil
	}
	var out []HardwareChange
	for _, c := range changes {
		if c.Kind != ChangeDiskShrink && (online == nil || !online(c)) {
			out = append(out, c)
		}
	}
	return out
}

// Descriptions describes each change for Observation.PendingRestart; nil for none.
func Descriptions(changes []HardwareChange) []string {
	if len(changes) == 0 {
		return nil
	}
	out := make([]string, 0, len(changes))
	for _, c := range changes {
		out = append(out, c.String())
	}
	return out
}

// ParamHotplug is the Provider parameter (spec.parameters) that gives the VMs a driver
// creates the headroom to grow while they run: a comma-separated list of "cpu" and
// "memory". It is read at creation only, so a VM made before it was set keeps growing
// only at its next power cycle. Off by default: hot-add changes what the guest sees
// (vSphere gives up vNUMA for a VM with CPU hot-add). HotplugFrom reads it.
const ParamHotplug = "hotplug"

// ParamMaxCPUs and ParamMaxMemoryMiB are the Provider parameters that bound how far a
// VM created with hotplug may grow while it runs, on the backends that fix the bound at
// creation (libvirt's <vcpu> and <maxMemory>, Proxmox VE's cores). Unset, the bound is
// defaultHotplugFactor times what the VM is created with, as KubeVirt does for its
// maxSockets and maxGuest; CPUs are capped at defaultMaxCPUs. Growing past the bound
// waits for the VM's next power cycle, which sets it again.
const (
	ParamMaxCPUs      = "maxCPUs"
	ParamMaxMemoryMiB = "maxMemoryMiB"
)

const (
	defaultHotplugFactor = 4
	defaultMaxCPUs       = 64
)

// Hotplug is what ParamHotplug, ParamMaxCPUs and ParamMaxMemoryMiB turn on.
type Hotplug struct {
	// CPU lets the VM's CPU count grow while it runs.
	CPU bool
	// Memory lets the VM's memory grow while it runs.
	Memory bool
	// MaxCPUs and MaxMemoryMiB are the Provider's bounds; zero when unset.
	MaxCPUs      int32
	MaxMemoryMiB int64
}

// Limits returns the bounds a VM created with cpus and memoryMiB gets: what it is
// created with for what may not grow while it runs, otherwise the Provider's bound or
// the default, never below what it is created with.
func (h Hotplug) Limits(cpus int32, memoryMiB int64) (maxCPUs int32, maxMemoryMiB int64) {
	maxCPUs, maxMemoryMiB = cpus, memoryMiB
	if h.CPU {
		maxCPUs = max(cpus, cmp.Or(h.MaxCPUs, min(defaultHotplugFactor*cpus, defaultMaxCPUs)))
	}
	if h.Memory {
		maxMemoryMiB = max(memoryMiB, cmp.Or(h.MaxMemoryMiB, defaultHotplugFactor*memoryMiB))
	}
	return maxCPUs, maxMemoryMiB
}

// HotplugFrom reads ParamHotplug, ParamMaxCPUs and ParamMaxMemoryMiB from a Provider's
// parameters; a value it cannot use is an error whose message says how to fix the
// Provider.
func HotplugFrom(params map[string]string) (Hotplug, error) {
	var h Hotplug
	if v := strings.TrimSpace(params[ParamHotplug]); v != "" {
		for item := range strings.SplitSeq(v, ",") {
			switch strings.ToLower(strings.TrimSpace(item)) {
			case "cpu":
				h.CPU = true
			case "memory":
				h.Memory = true
			default:
				return Hotplug{}, fmt.Errorf("parameters.%s %q: %q is neither cpu nor memory; list what may grow while a VM runs, e.g. cpu,memory, in the Provider",
					ParamHotplug, params[ParamHotplug], strings.TrimSpace(item))
			}
		}
	}
	maxCPUs, err := positiveParam(params, ParamMaxCPUs, 1<<10)
	if err != nil {
		return Hotplug{}, err
	}
	h.MaxCPUs = int32(maxCPUs)
	if h.MaxMemoryMiB, err = positiveParam(params, ParamMaxMemoryMiB, 1<<30); err != nil {
		return Hotplug{}, err
	}
	return h, nil
}

// positiveParam reads the whole number parameter key, 0 when unset; one that is not
// between 1 and limit is an error saying so.
func positiveParam(params map[string]string, key string, limit int64) (int64, error) {
	v := strings.TrimSpace(params[key])
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > limit {
		return 0, fmt.Errorf("parameters.%s %q is not a whole number from 1 to %d; set it in the Provider, or remove it for the default", key, v, limit)
	}
	return n, nil
}
