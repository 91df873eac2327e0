package proxmoxsim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A config change is written as qemu-server 8's update_vm_api writes it: every key
// set or deleted goes to the config's [PENDING] section first (a delete as a pending
// "delete:" entry), pending values equal to the current ones are dropped, and then
//
//   - on a stopped VM every pending change applies at once (vmconfig_apply_pending);
//   - on a running VM the changes that hotplug apply (vmconfig_hotplug_pending): the
//     ones with no effect on the running guest always (description, name, tags, the
//     cloud-init keys…), the others only when the request changed them and the VM's
//     hotplug features allow it: vcpus with cpu (up to cores × sockets), memory with
//     memory (and NUMA, which memory hotplug needs), new SCSI and VirtIO disks and a
//     disk's volume with disk, new NICs and a NIC's model or MAC with network; a
//     NIC's bridge, VLAN or rate, a disk's throttling and a CD-ROM's medium always.
//     Everything else stays pending: cores, sockets, machine, bios, an EFI disk, the
//     hotplug setting itself when it adds or removes cpu or memory…
//
// What stays pending applies at the VM's next start, stop, shutdown or reboot (not at a
// reset, nor when a hibernated VM resumes). GET config answers with the pending values
// in unless current=1; GET pending lists both; the digest covers both. A value that
// could not be hotplugged (more vcpus than cores × sockets, more memory than the
// host's maximum) stays pending, and the request fails with 400 "Parameter
// verification failed." and "hotplug problem - …" for the key, as PVE's does.
//
// Simplified: memory hotplug lands on PVE's DIMM steps but does not model the DIMM
// devices of a VM started with memory off those steps; USB, tablet and balloon
// changes stay pending; hotplugged CPUs and DIMMs always come online.

// fastPlug are the keys that apply to a running VM at once, whatever its hotplug
// features: they do not change the running guest (qemu-server's $fast_plug_option and
// its cloud-init keys, which regenerate the cloud-init drive at the next start).
var fastPlug = regexp.MustCompile(`^(description|hookscript|lock|migrate_downtime|migrate_speed|name|onboot|protection|shares|startup|tags|vmstatestorage|citype|ciuser|cipassword|ciupgrade|cicustom|searchdomain|nameserver|sshkeys|ipconfig[0-9]+)$`)

// pendingConfig is a VM's config being changed: its current values and its pending
// section.
type pendingConfig struct {
	node          string
	conf, pending map[string]string
	del           []string
}

// pendingChange is a copy of the VM's config to change; commit stores it.
func (v *vm) pendingChange() *pendingConfig {
	p := &pendingConfig{node: v.node, conf: maps.Clone(v.conf), pending: maps.Clone(v.pending), del: slices.Clone(v.pendingDelete)}
	if p.pending == nil {
		p.pending = map[string]string{}
	}
	return p
}

func (v *vm) commit(p *pendingConfig) {
	v.conf, v.pending, v.pendingDelete = p.conf, p.pending, p.del
	if len(v.pending) == 0 {
		v.pending = nil
	}
	if len(v.pendingDelete) == 0 {
		v.pendingDelete = nil
	}
}

// withPending is the config as GET config answers by default: the pending values in,
// the keys pending deletion out.
func (v *vm) withPending() map[string]string {
	out := maps.Clone(v.conf)
	maps.Copy(out, v.pending)
	for _, k := range v.pendingDelete {
		delete(out, k)
	}
	return out
}

// undelete takes k off the pending deletions.
func (p *pendingConfig) undelete(k string) {
	p.del = slices.DeleteFunc(p.del, func(d string) bool { return d == k })
}

// cleanup is cleanup_pending: a pending value equal to the current one, and the
// pending deletion of a key the config does not have, are dropped.
func (p *pendingConfig) cleanup() {
	for k, val := range p.pending {
		if cur, ok := p.conf[k]; ok && cur == val {
			delete(p.pending, k)
		}
	}
	p.del = slices.DeleteFunc(p.del, func(k string) bool { _, ok := p.conf[k]; return !ok })
}

// pendDelete records the deletion of k: an unused disk is destroyed and tags go at
// once, anything else becomes a pending deletion; a pending value of k is dropped
// (its new disk kept as unusedN). Deleting a key set nowhere does nothing, as PVE
// only warns.
func (s *Simulator) pendDelete(p *pendingConfig, k string) error {
	val, ok := p.conf[k]
	pendingVal, isPending := p.pending[k]
	if !ok && !isPending {
		return nil
	}
	if !ok {
		val = pendingVal
	}
	delete(p.pending, k)
	switch {
	case strings.HasPrefix(k, "unused"):
		if st, vol := s.findVolume(p.node, val); vol != nil {
			s.removeVolume(p.node, st, vol.name)
		}
		delete(p.conf, k)
		return nil
	case k == "tags":
		delete(p.conf, k)
		return nil
	case driveKey.MatchString(k) && isPending:
		keepUnused(p.conf, pendingVal)
	}
	if !slices.Contains(p.del, k) {
		p.del = append(p.del, k)
	}
	return nil
}

// applyPending is vmconfig_apply_pending: every pending change applies (a deleted or
// replaced disk kept as unusedN).
func (s *Simulator) applyPending(p *pendingConfig) {
	for _, k := range p.del {
		if old, ok := p.conf[k]; ok && driveKey.MatchString(k) {
			keepUnused(p.conf, old)
		}
		delete(p.conf, k)
	}
	p.del = nil
	p.cleanup()
	for _, k := range slices.Sorted(maps.Keys(p.pending)) {
		val := p.pending[k]
		if old, ok := p.conf[k]; ok && driveKey.MatchString(k) && parseProperty(old, "file").first != parseProperty(val, "file").first {
			keepUnused(p.conf, old)
		}
		p.conf[k] = val
	}
	clear(p.pending)
}

// applyPendingNow applies a VM's pending changes, as its start and stop do.
func (s *Simulator) applyPendingNow(v *vm) {
	if len(v.pending) == 0 && len(v.pendingDelete) == 0 {
		return
	}
	p := v.pendingChange()
	s.applyPending(p)
	v.commit(p)
}

// hotplug is vmconfig_hotplug_pending for the keys the request modified (fast-plug
// keys apply whatever the request): what applies leaves the pending section, the rest
// stays; it returns the hotplug errors by key.
func (s *Simulator) hotplug(p *pendingConfig, modified map[string]bool) map[string]string {
	errs := map[string]string{}
	for k, val := range p.pending {
		if fastPlug.MatchString(k) {
			p.conf[k] = val
			delete(p.pending, k)
		}
	}
	feats := hotplugFeatures(p.conf["hotplug"])
	for _, k := range slices.Clone(p.del) {
		if !modified[k] {
			continue
		}
		ok, problem := unplugs(p.conf, feats, k)
		if problem != "" {
			errs[k] = "hotplug problem - " + problem + "\n"
			continue
		}
		if !ok {
			continue
		}
		if old, isDrive := p.conf[k]; isDrive && driveKey.MatchString(k) {
			keepUnused(p.conf, old)
		}
		delete(p.conf, k)
		p.undelete(k)
	}
	for _, k := range slices.Sorted(maps.Keys(p.pending)) {
		if !modified[k] {
			continue
		}
		val, ok, problem := plugs(p.conf, feats, k, p.pending[k])
		if problem != "" {
			errs[k] = "hotplug problem - " + problem + "\n"
			continue
		}
		if !ok {
			continue
		}
		if old, exists := p.conf[k]; exists && driveKey.MatchString(k) && parseProperty(old, "file").first != parseProperty(val, "file").first {
			keepUnused(p.conf, old)
		}
		p.conf[k] = val
		delete(p.pending, k)
	}
	return errs
}

var (
	// stayingDrive matches the drives PVE does not unplug from a running VM.
	stayingDrive = regexp.MustCompile(`^(efidisk|ide|sata|tpmstate)\d+$`)
	// cpuOrMemory matches a hotplug value PVE does not change on a running VM: one
	// that has cpu or memory, or is to have them.
	cpuOrMemory = regexp.MustCompile(`cpu|memory`)
)

// unplugs reports whether the deletion of k applies to the running VM, or PVE's
// message when it fails.
func unplugs(conf map[string]string, feats map[string]bool, k string) (bool, string) {
	switch {
	case k == "hotplug":
		return !cpuOrMemory.MatchString(conf["hotplug"]), ""
	case k == "vcpus":
		return feats["cpu"], "" // all of cores × sockets come online
	case k == "memory":
		if !feats["memory"] {
			return false, ""
		}
		// PVE's default of 512 MiB is below what memory hotplug keeps.
		return false, lowMemory(staticMemoryMiB(conf))
	case fastPlug.MatchString(k), k == "cpuunits", k == "cpulimit":
		return true, ""
	case netPattern.MatchString(k):
		return feats["network"], ""
	case driveKey.MatchString(k):
		return feats["disk"] && !stayingDrive.MatchString(k), ""
	}
	return false, ""
}

// plugs reports whether the pending value val of k applies to the running VM, and the
// value it applies as, or PVE's message when it fails.
func plugs(conf map[string]string, feats map[string]bool, k, val string) (string, bool, string) {
	switch {
	case k == "hotplug":
		return val, !cpuOrMemory.MatchString(val) && !cpuOrMemory.MatchString(conf["hotplug"]), ""
	case k == "vcpus":
		if !feats["cpu"] {
			return val, false, ""
		}
		maxCPUs := max(atoiOr(conf["sockets"], 1), 1) * max(atoiOr(conf["cores"], 1), 1)
		if n := atoiOr(val, 0); n > maxCPUs {
			return val, false, "you can't add more vcpus than maxcpus"
		}
		return val, true, ""
	case k == "memory":
		if !feats["memory"] || conf["numa"] != "1" {
			return val, false, ""
		}
		return hotplugMemory(conf, val)
	case k == "cpuunits", k == "cpulimit", k == "agent":
		return val, true, ""
	case netPattern.MatchString(k):
		old, ok := conf[k]
		if !ok {
			return val, feats["network"], ""
		}
		oldModel, oldMAC, op := parseNet(old)
		newModel, newMAC, np := parseNet(val)
		if oldModel != newModel || !strings.EqualFold(oldMAC, newMAC) || op.opts["queues"] != np.opts["queues"] || op.opts["mtu"] != np.opts["mtu"] {
			return val, feats["network"], ""
		}
		return val, true, ""
	case k == "efidisk0", k == "tpmstate0":
		return val, false, ""
	case driveKey.MatchString(k):
		return val, drivePlugs(conf, feats, k, val), ""
	}
	return val, false, ""
}

// drivePlugs is vmconfig_update_disk: a CD-ROM's medium changes live, a disk's volume
// and a new disk need disk hotplug (and a new one a SCSI or VirtIO bus), and other
// changes to a disk's options wait.
func drivePlugs(conf map[string]string, feats map[string]bool, k, val string) bool {
	np := parseProperty(val, "file")
	if strings.Contains(np.first, "cloudinit") {
		return true // regenerated after the other changes
	}
	old, ok := conf[k]
	if !ok {
		return feats["disk"] && !strings.HasPrefix(k, "ide") && !strings.HasPrefix(k, "sata")
	}
	op := parseProperty(old, "file")
	if op.isCDROM() {
		return np.isCDROM()
	}
	if op.first != np.first {
		return feats["disk"]
	}
	for _, o := range []string{"aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor", "ro"} {
		if op.opts[o] != np.opts[o] {
			return false
		}
	}
	return true
}

// hotplugFeatures parses a hotplug value: network,disk,usb when unset or 1, none for
// 0.
func hotplugFeatures(val string) map[string]bool {
	switch val {
	case "", "1":
		val = "network,disk,usb"
	case "0":
		val = ""
	}
	out := map[string]bool{}
	for _, f := range listPattern.Split(val, -1) {
		if f != "" {
			out[f] = true
		}
	}
	return out
}

var hotplugFeature = regexp.MustCompile(`^(network|disk|cpu|memory|usb|cloudinit)$`)

// checkHotplug is the pve-hotplug-features format.
func checkHotplug(val string) string {
	if val == "0" || val == "1" {
		return ""
	}
	for _, f := range listPattern.Split(val, -1) {
		if f != "" && !hotplugFeature.MatchString(f) {
			return fmt.Sprintf("invalid format - invalid hotplug feature '%s'", f)
		}
	}
	return ""
}

// Memory hotplug, as PVE::QemuServer::Memory has it: a VM with memory hotplug starts
// with 1024 MiB of static memory (1024 per socket with 1 GiB hugepages) and DIMMs for
// the rest: 32 of 512 MiB (1 GiB with 1 GiB hugepages), then 32 of twice that, and so
// on, so its memory moves in those steps. The most it may have is what the host's
// physical address bits allow: 512 GiB for the default CPU types on the simulated
// host (46 bits, of which a CPU type other than host or max sees 40), 4 TiB for host
// and max.
const (
	staticMemory     = 1024
	maxMemoryDefault = 512 << 10
	maxMemoryHost    = 4 << 20
)

func hugepages1G(conf map[string]string) bool { return conf["hugepages"] == "1024" }

// staticMemoryMiB is the memory a VM with memory hotplug has without DIMMs.
func staticMemoryMiB(conf map[string]string) int {
	if hugepages1G(conf) {
		return staticMemory * max(atoiOr(conf["sockets"], 1), 1)
	}
	return staticMemory
}

// maxMemoryMiB is get_max_mem on the simulated host.
func maxMemoryMiB(conf map[string]string) int {
	cpu := parseProperty(conf["cpu"], "cputype").first
	if cpu == "host" || cpu == "max" {
		return maxMemoryHost
	}
	return maxMemoryDefault
}

// dimmSteps calls f with the memory a VM with memory hotplug has after each DIMM, in
// order, until f returns false.
func dimmSteps(conf map[string]string, f func(int) bool) {
	size, dimm := staticMemoryMiB(conf), 512
	if hugepages1G(conf) {
		dimm = 1024
	}
	for range 8 {
		for range 32 {
			size += dimm
			if !f(size) {
				return
			}
		}
		dimm *= 2
	}
}

// hotplugMemory is qemu_memory_hotplug: memory grows by DIMMs up to the first step at
// or above the value asked for, and shrinks by unplugging them down to the last step
// at or below it; the config then holds the step reached.
func hotplugMemory(conf map[string]string, val string) (string, bool, string) {
	want := memoryMiB(val)
	have := memoryMiB(conf["memory"])
	if want == have {
		return val, true, ""
	}
	static := staticMemoryMiB(conf)
	if want < static {
		return val, false, lowMemory(static)
	}
	if limit := maxMemoryMiB(conf); want > limit {
		return val, false, fmt.Sprintf("you cannot add more memory than max mem %d MB!", limit)
	}
	reached := static
	dimmSteps(conf, func(size int) bool {
		if want > have {
			reached = size
			return size < want
		}
		if size > want {
			return false
		}
		reached = size
		return true
	})
	return strconv.Itoa(reached), true, ""
}

// lowMemory is qemu_memory_hotplug's refusal of memory below the static memory, a
// Perl die without a newline, which names where it died.
func lowMemory(static int) string {
	return fmt.Sprintf("memory can't be lower than %d MB at /usr/share/perl5/PVE/QemuServer/Memory.pm line 232.", static)
}

// memoryMiB reads a memory value, [current=]N, 512 when unset.
func memoryMiB(val string) int {
	if p := parseProperty(val, "current"); p.first != "" {
		val = p.first
	}
	return atoiOr(val, 512)
}

// checkStartHardware is what config_to_command refuses: more CPUs than the node has,
// memory hotplug without NUMA or below its static memory, more memory than the host
// takes; and what QEMU refuses: more vcpus than cores × sockets.
func checkStartHardware(conf map[string]string) error {
	maxCPUs := max(atoiOr(conf["sockets"], 1), 1) * max(atoiOr(conf["cores"], 1), 1)
	if maxCPUs > nodeCPUs {
		return failf("MAX %d vcpus allowed per VM on this node", nodeCPUs)
	}
	if atoiOr(conf["vcpus"], 0) > maxCPUs {
		return failf("start failed: QEMU exited with code 1")
	}
	if !hotplugFeatures(conf["hotplug"])["memory"] {
		return nil
	}
	mem := memoryMiB(conf["memory"])
	switch {
	case conf["numa"] != "1":
		return failf("NUMA needs to be enabled for memory hotplug")
	case mem > maxMemoryMiB(conf):
		return failf("Total memory is bigger than %dMB", maxMemoryMiB(conf))
	case mem < staticMemoryMiB(conf):
		return failf("minimum memory must be %dMB", staticMemoryMiB(conf))
	}
	return nil
}

// getVMPending is GET pending: every key of the config with its current value, its
// pending value and whether it is to be deleted (1), the keys only pending or only to
// be deleted, and the digest; the password masked.
func (s *Simulator) getVMPending(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	mask := func(k, val string) any {
		if k == "cipassword" {
			return "**********"
		}
		return typedValue(k, val)
	}
	out := make([]map[string]any, 0, len(v.conf)+len(v.pending)+1)
	keys := slices.Sorted(maps.Keys(v.withPendingKeys()))
	for _, k := range keys {
		item := map[string]any{"key": k}
		if val, ok := v.conf[k]; ok {
			item["value"] = mask(k, val)
		}
		if val, ok := v.pending[k]; ok {
			item["pending"] = mask(k, val)
		}
		if slices.Contains(v.pendingDelete, k) {
			item["delete"] = 1
		}
		out = append(out, item)
	}
	out = append(out, map[string]any{"key": "digest", "value": v.digest()})
	return out, nil
}

// withPendingKeys are every key the config or its pending section names.
func (v *vm) withPendingKeys() map[string]bool {
	out := map[string]bool{}
	for k := range v.conf {
		out[k] = true
	}
	for k := range v.pending {
		out[k] = true
	}
	for _, k := range v.pendingDelete {
		out[k] = true
	}
	return out
}
