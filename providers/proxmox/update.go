package proxmox

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// Keys of class targets.
const (
	targetStorage = "storage"
	targetBridge  = "bridge"
)

// changeSet is how a VM differs from its machine's spec.
type changeSet struct {
	// set and del are config keys to set and to delete, in one config update; revert
	// are keys whose pending change to drop in it.
	set    map[string]any
	del    []string
	revert []string
	// offline maps the config keys that change only while the VM is stopped to a
	// description of their change, for RestartRequired's message ("" for a key that
	// is part of another key's change).
	offline map[string]string
	// what describes the change of a key that may be made online (vcpus, memory), for
	// when PVE holds it pending instead.
	what map[string]string
	// held are the keys held back for the VM's next power cycle, with the values they
	// get then, and heldWhat the descriptions of their changes.
	held     map[string]any
	heldWhat map[string]string
	// grow maps disk keys to their new size in GiB.
	grow map[string]int64
}

func (c changeSet) empty() bool {
	return len(c.set) == 0 && len(c.del) == 0 && len(c.revert) == 0 && len(c.grow) == 0
}

// setOffline sets key to val, a change made only while the VM is stopped; what
// describes it ("" when another key's description covers it).
func (c *changeSet) setOffline(key string, val any, what string) {
	c.set[key] = val
	c.offline[key] = what
}

// hold takes key's change out of what is written now and keeps it for the VM's next
// power cycle, described by what.
func (c *changeSet) hold(key, what string) {
	if v, ok := c.set[key]; ok {
		c.held[key] = v
		delete(c.set, key)
	}
	c.heldWhat[key] = what
}

// waitForRestart takes the changes that need the VM stopped out of c, for its next
// power cycle.
func (c *changeSet) waitForRestart() {
	for key, what := range c.offline {
		c.hold(key, what)
	}
	c.offline = map[string]string{}
}

// pendingRestart describes the changes held back for the VM's next power cycle, for
// Observation.PendingRestart: the CPUs' first, then memory's, then the others' by key.
func (c changeSet) pendingRestart() []string {
	var out []string
	for _, key := range slices.SortedFunc(maps.Keys(c.heldWhat), byKeyOrder) {
		if what := c.heldWhat[key]; what != "" && !slices.Contains(out, what) {
			out = append(out, what)
		}
	}
	return out
}

// byKeyOrder orders config keys for messages: the CPUs', then memory, then the others
// by name.
func byKeyOrder(a, b string) int {
	rank := func(k string) int {
		switch k {
		case "cores", "sockets", "vcpus":
			return 0
		case "memory":
			return 1
		}
		return 2
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(a, b)
}

// changes compares the VM's config to the machine's spec: CPUs, memory and disks as
// providersdk.HardwareDiff does (disks grown, or added on their storage class's
// storage; a disk that would shrink is refused), firmware, NICs on their network
// class's bridge, cloud-init network config and user data, and the identity tag; at
// creation, the Provider's hotplug headroom (see hotplug.go). For an adopted VM
// (spec.adoptProviderID) it compares CPUs, memory, disks and the tag only: its
// firmware, NICs, cloud-init and user data are the owner's, set before banlieue knew
// it, and rewriting them would cut a running guest off its network. When the change
// waits for the VM's next power cycle (providersdk.WaitsForRestart: the VM runs, and
// the machine does not ask for it off), what needs the VM stopped is held back
// (c.held, described by c.pendingRestart) and the rest is written now; otherwise
// c.offline keeps what needs the VM stopped. What PVE holds pending for the VM's CPUs
// and memory is lined up with the machine (see pendingHardware).
func (s *session) changes(m *providersdk.Machine, vm *vmState, power banlieuev1.PowerState) (changeSet, error) {
	c := changeSet{
		set: map[string]any{}, grow: map[string]int64{}, offline: map[string]string{},
		what: map[string]string{}, held: map[string]any{}, heldWhat: map[string]string{},
	}
	conf := vm.conf
	disks := conf.DiskKeys()
	hw := providersdk.HardwareDiff(m.Spec, hardware(conf, disks))
	if err := providersdk.RefuseShrink("Proxmox VE", hw); err != nil {
		return c, err
	}
	cpusSet := creating(m, conf, power) && s.headroom(m, vm, &c)
	for _, h := range hw {
		switch {
		case h.Kind == providersdk.ChangeCPUs && !cpusSet:
			s.cpuChange(vm, h, &c)
		case h.Kind == providersdk.ChangeMemory:
			if err := memoryChange(conf, h, &c); err != nil {
				return c, err
			}
		}
	}
	bootStorage := ""
	if len(disks) > 0 {
		bootStorage = pve.StorageOf(conf[disks[0]])
	}
	adopted := m.Spec.Adopts()
	switch fw := m.Spec.Hardware.Firmware; {
	case adopted:
		// The firmware the guest was installed with stays.
	case fw == banlieuev1.FirmwareBIOS:
		if conf["bios"] != "" && conf["bios"] != "seabios" {
			c.setOffline("bios", "seabios", "firmware to BIOS")
		}
	case fw == banlieuev1.FirmwareEFI || fw == banlieuev1.FirmwareEFISecure:
		if conf["bios"] != "ovmf" {
			c.setOffline("bios", "ovmf", "firmware to UEFI")
		}
		if conf["efidisk0"] == "" {
			keys := map[bool]string{true: "1", false: "0"}[fw == banlieuev1.FirmwareEFISecure]
			// PVE adds an EFI disk to a stopped VM only.
			c.setOffline("efidisk0", fmt.Sprintf("%s:1,efitype=4m,pre-enrolled-keys=%s", bootStorage, keys), "")
			if _, ok := c.offline["bios"]; !ok {
				c.offline["efidisk0"] = "adding an EFI disk"
			}
		}
		if fw == banlieuev1.FirmwareEFISecure && conf["machine"] == "" {
			// Secure Boot needs SMM, which only the q35 machine type has.
			c.setOffline("machine", "q35", "machine type to q35")
		}
	}
	for _, h := range hw {
		switch h.Kind {
		case providersdk.ChangeDiskGrow:
			c.grow[disks[h.Disk]] = h.To / providersdk.GiB
		case providersdk.ChangeDiskAdd:
			key := freeKey(conf, "scsi", 31)
			conf = withKey(conf, key)
			c.set[key] = fmt.Sprintf("%s:%d", first(m.Spec.Disks[h.Disk].Target[targetStorage], bootStorage), h.To/providersdk.GiB)
		}
	}
	if !adopted {
		if err := s.nicChanges(m, vm.conf, &c); err != nil {
			return c, err
		}
		userDataChanges(m, vm.conf, &c)
	}
	if tags := vm.conf.Tags(); !slices.Contains(tags, TagPrefix+string(m.UID)) {
		c.set["tags"] = pve.JoinTags(markTags(tags, m))
	}
	waits := providersdk.WaitsForRestart(power, m.DesiredPower())
	if waits {
		c.waitForRestart()
	}
	c.pendingHardware(vm.conf, vm.pending, power != banlieuev1.PowerStatePoweredOff, waits)
	return c, nil
}

// hardware is the VM's shape as its config gives it, for providersdk.HardwareDiff:
// disk sizes in whole GiB, rounded up, as PVE's resize takes them.
func hardware(conf pve.Config, disks []string) providersdk.Hardware {
	hw := providersdk.Hardware{CPUs: int32(cpus(conf)), MemoryMiB: memoryMiB(conf)}
	for _, k := range disks {
		hw.DiskBytes = append(hw.DiskBytes, pve.DiskGiB(conf[k])*providersdk.GiB)
	}
	return hw
}

// nicChanges puts NIC i on the bridge of interface i's network class (keeping the
// template's model and the clone's MAC, or giving it the MAC the machine's seed ISO
// names it by, see nocloud.MachineMACs), sets ipconfigN from the interface's IPAM, and removes the
// template's NICs beyond the interfaces. A machine without interfaces keeps the
// template's NICs.
func (s *session) nicChanges(m *providersdk.Machine, conf pve.Config, c *changeSet) error {
	if len(m.Spec.Interfaces) == 0 {
		return nil
	}
	var macs []string
	if isSeedOf(descriptionValue(conf["description"], descriptionUserData), m.UID) {
		macs = nocloud.MachineMACs(m)
	}
	for i, iface := range m.Spec.Interfaces {
		key := "net" + strconv.Itoa(i)
		p := pve.ParseProperty(conf[key])
		if p.First == "" {
			p = pve.ParseProperty("virtio")
		}
		if macs != nil {
			model, _, _ := strings.Cut(p.First, "=")
			p.First = model + "=" + macs[i]
		}
		bridge := first(iface.Target[targetBridge], p.Opts["bridge"])
		if bridge == "" {
			return providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network class %q names no bridge and the template has no NIC %d to keep", iface.Name, iface.NetworkClass, i)
		}
		p.Set("bridge", bridge)
		if iface.MTU > 0 {
			p.Set("mtu", strconv.Itoa(int(iface.MTU)))
		}
		if want := p.String(); want != conf[key] {
			c.set[key] = want
		}
		ipc, ns, err := ipConfig(iface)
		if err != nil {
			return err
		}
		if ipk := "ipconfig" + strconv.Itoa(i); conf[ipk] != ipc {
			c.set[ipk] = ipc
		}
		if ns != "" && conf["nameserver"] != ns {
			c.set["nameserver"] = ns
		}
	}
	for _, k := range conf.NICKeys() {
		if n, _ := strconv.Atoi(strings.TrimPrefix(k, "net")); n >= len(m.Spec.Interfaces) {
			c.del = append(c.del, k)
			if conf["ipconfig"+strconv.Itoa(n)] != "" {
				c.del = append(c.del, "ipconfig"+strconv.Itoa(n))
			}
		}
	}
	return nil
}

// ipConfig is an interface's cloud-init network config, as PVE's ipconfigN writes it
// (one address of each family, with the gateway of its family), and its name servers.
func ipConfig(iface infrav1.MachineInterface) (string, string, error) {
	a, err := nocloud.AddressingOf(iface)
	switch {
	case err != nil:
		return "", "", err
	case a.DHCP:
		return "ip=dhcp", "", nil
	}
	var parts []string
	for _, p := range a.Addresses {
		if p.Addr().Is4() && !slices.ContainsFunc(parts, func(s string) bool { return strings.HasPrefix(s, "ip=") }) {
			parts = append(parts, "ip="+p.String())
			if a.Gateway.Is4() {
				parts = append(parts, "gw="+a.Gateway.String())
			}
		} else if p.Addr().Is6() && !slices.ContainsFunc(parts, func(s string) bool { return strings.HasPrefix(s, "ip6=") }) {
			parts = append(parts, "ip6="+p.String())
			if a.Gateway.Is6() {
				parts = append(parts, "gw6="+a.Gateway.String())
			}
		}
	}
	return strings.Join(parts, ","), strings.Join(a.Nameservers, " "), nil
}

// memoryMiB is a config's memory; PVE 8 writes it as a property string, current=N.
func memoryMiB(conf pve.Config) int64 {
	p := pve.ParseProperty(conf["memory"])
	return atoiOr(first(p.Opts["current"], strings.TrimPrefix(p.First, "current=")), 512)
}

func atoiOr(s string, def int64) int64 {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}

// freeKey is the first unused key of prefix0, prefix1 and so on.
func freeKey(conf pve.Config, prefix string, limit int) string {
	for i := range limit {
		if _, ok := conf[prefix+strconv.Itoa(i)]; !ok {
			return prefix + strconv.Itoa(i)
		}
	}
	return prefix + strconv.Itoa(limit)
}

// withKey is conf with key taken, so the next freeKey skips it.
func withKey(conf pve.Config, key string) pve.Config {
	out := make(pve.Config, len(conf)+1)
	for k, v := range conf {
		out[k] = v
	}
	out[key] = "pending"
	return out
}
