package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// What grows while a VM runs, as qemu-server 8 (PVE 8.x) has it: a config update of a
// running VM goes to the config's pending section, and PVE applies at once what its
// hotplug setting lets it (vmconfig_hotplug_pending), the rest at the VM's next start
// or stop.
//
//   - CPUs: with "cpu" in hotplug, QEMU starts with cores × sockets CPUs possible and
//     vcpus of them present; vcpus grows up to cores × sockets online. cores and
//     sockets change only at a power cycle, and cores × sockets may not exceed the
//     node's CPUs (or the VM does not start).
//   - Memory: with "memory" in hotplug (which needs numa: 1), QEMU starts with 1024 MiB
//     and DIMMs for the rest: 32 of 512 MiB, then 32 of 1 GiB, then 2 GiB and so on
//     (twice those with 1 GiB hugepages). Memory grows online by DIMMs, so to those
//     steps only, up to the most the host's physical address bits allow (up to 4 TiB;
//     512 GiB on most hosts for PVE's default CPU type), which no config key sets:
//     PVE 8's memory property has current only.
//
// The driver writes a CPU or memory increase of a running VM only when PVE will make it
// online, and holds back every other CPU or memory change for the VM's next power
// cycle (Observation.PendingRestart), so it never leaves PVE a pending change it did
// not mean to: PVE would apply a held-back decrease online (unplugging CPUs and DIMMs
// the guest may refuse), and a change beyond what hotplugs would stay pending, in the
// way of the next one. What PVE still refuses (a guest that does not take the CPU,
// memory beyond the host's maximum) it keeps pending, and the driver then waits for
// the power cycle that applies it. A CPU or memory change PVE holds pending that the
// machine does not want (someone else's, or one the spec changed since) is reverted.

// Memory hotplug's static memory, the size of its first DIMMs, and how many DIMMs of
// a size come before the next size (twice as large).
const (
	hotplugStaticMiB = 1024
	firstDIMMMiB     = 512
	dimmsPerSize     = 32
	dimmSizes        = 8
)

// hotplugFeatures are the hotplug features of a config's hotplug value, in its order:
// PVE's default network,disk,usb when it is unset or 1, none for 0.
func hotplugFeatures(val string) []string {
	switch strings.TrimSpace(val) {
	case "", "1":
		return []string{"network", "disk", "usb"}
	case "0":
		return nil
	}
	return strings.FieldsFunc(val, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == 0 })
}

// hotplugs reports whether a config's hotplug value has feature.
func hotplugs(conf pve.Config, feature string) bool {
	return slices.Contains(hotplugFeatures(conf["hotplug"]), feature)
}

// cpus is a config's CPU count: vcpus when set (the CPUs present in a VM with CPU
// hotplug), else cores times sockets.
func cpus(conf pve.Config) int64 {
	if n := atoiOr(conf["vcpus"], 0); n > 0 {
		return n
	}
	return maxCPUs(conf)
}

// maxCPUs is cores times sockets: the CPUs QEMU starts with room for.
func maxCPUs(conf pve.Config) int64 {
	return atoiOr(conf["cores"], 1) * atoiOr(conf["sockets"], 1)
}

// staticMemoryMiB is the memory a VM with memory hotplug has without DIMMs.
func staticMemoryMiB(conf pve.Config) int64 {
	if conf["hugepages"] == "1024" {
		return hotplugStaticMiB * atoiOr(conf["sockets"], 1)
	}
	return hotplugStaticMiB
}

// onDIMMStep reports whether a VM with memory hotplug can have mib: its static memory
// and DIMMs add up to it (PVE's foreach_dimm).
func onDIMMStep(conf pve.Config, mib int64) bool {
	size, dimm := staticMemoryMiB(conf), int64(firstDIMMMiB)
	if conf["hugepages"] == "1024" {
		dimm = 1024
	}
	if mib == size {
		return true
	}
	for range dimmSizes {
		for range dimmsPerSize {
			if size += dimm; size >= mib {
				return size == mib
			}
		}
		dimm *= 2
	}
	return false
}

// memoryGrowsOnline reports whether PVE grows the running VM's memory from from to to
// online, by DIMMs: it has memory hotplug and NUMA, and both sizes are DIMM steps (PVE
// would add DIMMs past the size asked for, and cannot add to a VM started between
// steps).
func memoryGrowsOnline(conf pve.Config, from, to int64) bool {
	return to > from && hotplugs(conf, "memory") && conf["numa"] == "1" &&
		from >= staticMemoryMiB(conf) && onDIMMStep(conf, from) && onDIMMStep(conf, to)
}

// creating reports whether Update is shaping the VM its clone just made: a machine's
// own VM (not adopted), stopped, that does not carry the machine's tag yet, which the
// first config update writes together with the headroom.
func creating(m *providersdk.Machine, conf pve.Config, power banlieuev1.PowerState) bool {
	return !m.Spec.Adopts() && power == banlieuev1.PowerStatePoweredOff && !slices.Contains(conf.Tags(), TagPrefix+string(m.UID))
}

// headroom gives the VM being created the Provider's hotplug: "cpu" in hotplug with
// cores the most CPUs it may grow to (Hotplug.Limits, at most the node's CPUs), one
// socket and vcpus its CPUs; "memory" in hotplug with NUMA on. PVE's other hotplug
// features stay as the template has them (network,disk,usb by default). A VM below
// memory hotplug's static 1024 MiB, or with its own NUMA nodes, gets no memory hotplug,
// which PVE would not start. It reports whether it sets the CPUs.
func (s *session) headroom(m *providersdk.Machine, vm *vmState, c *changeSet) bool {
	conf := vm.conf
	want := int64(m.Spec.Hardware.CPUs)
	if want <= 0 {
		want = cpus(conf)
	}
	mem := m.Spec.Hardware.MemoryMiB
	if mem <= 0 {
		mem = memoryMiB(conf)
	}
	features := hotplugFeatures(conf["hotplug"])
	added := false
	if s.hotplug.CPU && !slices.Contains(features, "cpu") {
		features, added = append(features, "cpu"), true
	}
	memory := s.hotplug.Memory && mem >= staticMemoryMiB(conf) && !hasNUMANodes(conf)
	if memory && !slices.Contains(features, "memory") {
		features, added = append(features, "memory"), true
	}
	if memory && conf["numa"] != "1" {
		c.setOffline("numa", 1, "")
	}
	if added {
		c.setOffline("hotplug", strings.Join(features, ","), "")
	}
	if !s.hotplug.CPU {
		return false
	}
	limit, _ := s.hotplug.Limits(int32(want), mem)
	c.setCPUs(conf, max(want, s.capCPUs(vm.Node, int64(limit))), want, "")
	return true
}

// hasNUMANodes reports whether a config defines its own NUMA nodes (numa0…numa7),
// with which PVE refuses memory hotplug.
func hasNUMANodes(conf pve.Config) bool {
	for i := range 8 {
		if conf["numa"+strconv.Itoa(i)] != "" {
			return true
		}
	}
	return false
}

// cpuChange sets the VM's CPUs to h.To: vcpus, online, when the running VM has CPU
// hotplug and room for them; otherwise at its next power cycle, vcpus within cores ×
// sockets for a VM that has vcpus (cores raised to the Provider's new bound when they
// are fewer), cores for one that has not.
func (s *session) cpuChange(vm *vmState, h providersdk.HardwareChange, c *changeSet) {
	conf := vm.conf
	switch {
	case conf["vcpus"] == "":
		c.setCPUs(conf, h.To, 0, h.String())
	case h.To <= maxCPUs(conf):
		c.set["vcpus"] = int(h.To)
		c.what["vcpus"] = h.String()
		if !h.Increase() || !hotplugs(conf, "cpu") {
			c.offline["vcpus"] = h.String()
		}
	default:
		limit, _ := s.hotplug.Limits(int32(h.To), memoryMiB(conf))
		c.setCPUs(conf, max(h.To, s.capCPUs(vm.Node, int64(limit))), h.To, h.String())
	}
}

// setCPUs sets cores (one socket) and, when vcpus > 0, vcpus, for the next power
// cycle; what describes the change.
func (c *changeSet) setCPUs(conf pve.Config, cores, vcpus int64, what string) {
	if cores != atoiOr(conf["cores"], 1) {
		c.setOffline("cores", int(cores), what)
		what = "" // one change, described once
	}
	if conf["sockets"] != "" && conf["sockets"] != "1" {
		c.setOffline("sockets", 1, what)
		what = ""
	}
	if vcpus > 0 && strconv.FormatInt(vcpus, 10) != conf["vcpus"] {
		c.setOffline("vcpus", int(vcpus), what)
	}
}

// memoryChange sets the VM's memory to h.To: online when PVE grows the running VM to it
// (memoryGrowsOnline), else at its next power cycle. A VM with memory hotplug below
// its static memory would not start, which is refused.
func memoryChange(conf pve.Config, h providersdk.HardwareChange, c *changeSet) error {
	if static := staticMemoryMiB(conf); hotplugs(conf, "memory") && h.To < static {
		return providersdk.Permanent(infrav1.MachineFailedReason,
			"%s: the VM has memory hotplug, with which Proxmox VE starts no VM below %d MiB; give the VM class at least %d MiB", h, static, static)
	}
	c.set["memory"] = strconv.FormatInt(h.To, 10)
	c.what["memory"] = h.String()
	if !memoryGrowsOnline(conf, h.From, h.To) {
		c.offline["memory"] = h.String()
	}
	return nil
}

// hardwareKeys are the config keys of the VM's CPUs and memory, whose pending changes
// the driver keeps in line with the machine (see pendingHardware).
var hardwareKeys = []string{"cores", "sockets", "vcpus", "memory"}

// pendingHardware lines c up with what PVE holds pending for the VM's CPUs and memory,
// once c holds what is written now (set) and what waits (held). A change to a running
// VM that PVE already holds pending is not written again: PVE could not hotplug it, so
// it needs the VM stopped, and waits for its next power cycle when the change does
// (waits). A pending value the driver would not write (not the one it holds back, or
// none) is reverted, so that the next power cycle does not apply it.
func (c *changeSet) pendingHardware(conf pve.Config, pending pve.Pending, running, waits bool) {
	for _, k := range hardwareKeys {
		v, ok := c.set[k]
		if p, held := pending.Set[k]; !ok || !running || !held || p != fmt.Sprint(v) {
			continue
		}
		if waits {
			c.hold(k, c.what[k])
		} else if _, off := c.offline[k]; !off {
			c.offline[k] = c.what[k]
		}
	}
	for _, k := range hardwareKeys {
		if _, written := c.set[k]; written {
			continue
		}
		target, has := conf[k]
		if v, ok := c.held[k]; ok {
			target, has = fmt.Sprint(v), true
		}
		p, isPending := pending.Set[k]
		switch {
		case isPending && (!has || p != target):
			c.revert = append(c.revert, k)
		case slices.Contains(pending.Delete, k) && has:
			c.revert = append(c.revert, k)
		}
	}
}

// capCPUs is n, but no more than the node's CPUs when the cluster listed them: PVE
// starts no VM with more cores × sockets than its node has CPUs.
func (s *session) capCPUs(node string, n int64) int64 {
	s.nodeCPUsMu.Lock()
	defer s.nodeCPUsMu.Unlock()
	if limit := int64(s.nodeCPUs[node]); limit > 0 && n > limit {
		return limit
	}
	return n
}

// learnNodeCPUs records the nodes' CPU counts from the cluster's listing.
func (s *session) learnNodeCPUs(nodes []pve.Node) {
	s.nodeCPUsMu.Lock()
	defer s.nodeCPUsMu.Unlock()
	for _, n := range nodes {
		s.nodeCPUs[n.Name] = n.CPUs // 0: unknown, and not capped
	}
}

// knowNodeCPUs lists the cluster's nodes, once a session, when the CPUs of the VM's
// node are not known and a config update about to be written may need them: the VM
// is stopped and has, or is to get, CPU hotplug.
func (s *session) knowNodeCPUs(ctx context.Context, vm *vmState, power banlieuev1.PowerState) error {
	if power != banlieuev1.PowerStatePoweredOff || (!s.hotplug.CPU && vm.conf["vcpus"] == "") {
		return nil
	}
	s.nodeCPUsMu.Lock()
	_, known := s.nodeCPUs[vm.Node]
	s.nodeCPUsMu.Unlock()
	if known {
		return nil
	}
	nodes, err := s.api.Nodes(ctx)
	if err != nil {
		return err
	}
	s.learnNodeCPUs(nodes)
	s.nodeCPUsMu.Lock()
	defer s.nodeCPUsMu.Unlock()
	if _, known := s.nodeCPUs[vm.Node]; !known {
		s.nodeCPUs[vm.Node] = 0 // not listed to these credentials: not capped, not asked again
	}
	return nil
}
