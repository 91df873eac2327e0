package proxmox

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Keys of class targets.
const (
	targetStorage = "storage"
	targetBridge  = "bridge"
)

// changeSet is how a VM differs from its machine's spec.
type changeSet struct {
	// set and del are config keys to set and to delete, in one config update.
	set map[string]any
	del []string
	// offline lists the config changes that need the VM stopped, for a message.
	offline []string
	// grow maps disk keys to their new size in GiB.
	grow map[string]int64
}

func (c changeSet) empty() bool { return len(c.set) == 0 && len(c.del) == 0 && len(c.grow) == 0 }

// changes compares the VM's config to the machine's spec: CPUs, memory, firmware,
// disks (grown, or added on their storage class's storage), NICs on their network
// class's bridge, cloud-init network config and user data, and the identity tag.
func (s *session) changes(_ context.Context, m *providersdk.Machine, vm *vmState) (changeSet, error) {
	c := changeSet{set: map[string]any{}, grow: map[string]int64{}}
	conf := vm.conf
	hw := m.Spec.Hardware
	setOffline := func(key string, val any, what string) {
		c.set[key] = val
		c.offline = append(c.offline, what)
	}
	if hw.CPUs > 0 && int64(hw.CPUs) != cpus(conf) {
		setOffline("cores", int(hw.CPUs), fmt.Sprintf("CPUs from %d to %d", cpus(conf), hw.CPUs))
		if conf["sockets"] != "" && conf["sockets"] != "1" {
			c.set["sockets"] = 1
		}
	}
	if mem := memoryMiB(conf); hw.MemoryMiB > 0 && hw.MemoryMiB != mem {
		setOffline("memory", strconv.FormatInt(hw.MemoryMiB, 10), fmt.Sprintf("memory from %d MiB to %d MiB", mem, hw.MemoryMiB))
	}
	disks := conf.diskKeys()
	bootStorage := ""
	if len(disks) > 0 {
		bootStorage = storageOf(conf[disks[0]])
	}
	switch hw.Firmware {
	case banlieuev1.FirmwareBIOS:
		if conf["bios"] != "" && conf["bios"] != "seabios" {
			setOffline("bios", "seabios", "firmware to BIOS")
		}
	case banlieuev1.FirmwareEFI, banlieuev1.FirmwareEFISecure:
		if conf["bios"] != "ovmf" {
			setOffline("bios", "ovmf", "firmware to UEFI")
		}
		if conf["efidisk0"] == "" {
			keys := map[bool]string{true: "1", false: "0"}[hw.Firmware == banlieuev1.FirmwareEFISecure]
			c.set["efidisk0"] = fmt.Sprintf("%s:1,efitype=4m,pre-enrolled-keys=%s", bootStorage, keys)
		}
		if hw.Firmware == banlieuev1.FirmwareEFISecure && conf["machine"] == "" {
			// Secure Boot needs SMM, which only the q35 machine type has.
			setOffline("machine", "q35", "machine type to q35")
		}
	}
	for i, d := range m.Spec.Disks {
		want := int64(d.SizeGiB)
		if i < len(disks) {
			have := diskGiB(conf[disks[i]])
			switch {
			case want > have:
				c.grow[disks[i]] = want
			case want < have:
				return c, providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
					"disk %q is %d GiB on Proxmox VE and cannot shrink to %d GiB; give the VM class a disk at least that large", d.Name, have, want)
			}
			continue
		}
		key := freeKey(conf, "scsi", 31)
		conf = withKey(conf, key)
		c.set[key] = fmt.Sprintf("%s:%d", first(d.Target[targetStorage], bootStorage), want)
	}
	if err := s.nicChanges(m, vm.conf, &c); err != nil {
		return c, err
	}
	if snippet := descriptionValue(vm.conf["description"], descriptionUserData); snippet != "" && vm.conf["cicustom"] != "user="+snippet {
		c.set["cicustom"] = "user=" + snippet
	}
	tag := TagPrefix + string(m.UID)
	if tags := splitTags(vm.conf["tags"]); !slices.Contains(tags, tag) {
		c.set["tags"] = strings.Join(append(tags, tag), ";")
	}
	return c, nil
}

// nicChanges puts NIC i on the bridge of interface i's network class (keeping the
// template's model and MAC), sets ipconfigN from the interface's IPAM, and removes the
// template's NICs beyond the interfaces. A machine without interfaces keeps the
// template's NICs.
func (s *session) nicChanges(m *providersdk.Machine, conf config, c *changeSet) error {
	if len(m.Spec.Interfaces) == 0 {
		return nil
	}
	for i, iface := range m.Spec.Interfaces {
		key := "net" + strconv.Itoa(i)
		p := parseProperty(conf[key])
		if p.first == "" {
			p = parseProperty("virtio")
		}
		bridge := first(iface.Target[targetBridge], p.opts["bridge"])
		if bridge == "" {
			return providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network class %q names no bridge and the template has no NIC %d to keep", iface.Name, iface.NetworkClass, i)
		}
		p.set("bridge", bridge)
		if iface.MTU > 0 {
			p.set("mtu", strconv.Itoa(int(iface.MTU)))
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
	for _, k := range conf.nicKeys() {
		if n, _ := strconv.Atoi(strings.TrimPrefix(k, "net")); n >= len(m.Spec.Interfaces) {
			c.del = append(c.del, k)
			if conf["ipconfig"+strconv.Itoa(n)] != "" {
				c.del = append(c.del, "ipconfig"+strconv.Itoa(n))
			}
		}
	}
	return nil
}

// ipConfig is an interface's cloud-init network config, as PVE's ipconfigN writes it,
// and its name servers: DHCP unless the IPAM is static.
func ipConfig(iface infrav1.MachineInterface) (string, string, error) {
	if iface.IPAM == nil || iface.IPAM.Source == "" || iface.IPAM.Source == banlieuev1.IPAMSourceDHCP {
		return "ip=dhcp", "", nil
	}
	if iface.IPAM.Source != banlieuev1.IPAMSourceStatic || iface.IPAM.Static == nil {
		return "", "", providersdk.Permanent(infrav1.MachineFailedReason,
			"interface %q: IPAM source %s is not supported by the Proxmox provider; use dhcp or static", iface.Name, iface.IPAM.Source)
	}
	st := iface.IPAM.Static
	var parts []string
	gw, _ := netip.ParseAddr(st.Gateway)
	for _, a := range st.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return "", "", providersdk.Permanent(infrav1.MachineFailedReason, "interface %q: address %q is not in CIDR notation", iface.Name, a)
		}
		if p.Addr().Is4() && !slices.ContainsFunc(parts, func(s string) bool { return strings.HasPrefix(s, "ip=") }) {
			parts = append(parts, "ip="+p.String())
			if gw.Is4() {
				parts = append(parts, "gw="+gw.String())
			}
		} else if p.Addr().Is6() && !slices.ContainsFunc(parts, func(s string) bool { return strings.HasPrefix(s, "ip6=") }) {
			parts = append(parts, "ip6="+p.String())
			if gw.Is6() {
				parts = append(parts, "gw6="+gw.String())
			}
		}
	}
	return strings.Join(parts, ","), strings.Join(st.Nameservers, " "), nil
}

// cpus is a config's vCPU count: cores times sockets.
func cpus(conf config) int64 {
	cores, sockets := atoiOr(conf["cores"], 1), atoiOr(conf["sockets"], 1)
	return cores * sockets
}

// memoryMiB is a config's memory; PVE 8 writes it as a property string, current=N.
func memoryMiB(conf config) int64 {
	p := parseProperty(conf["memory"])
	return atoiOr(first(p.opts["current"], strings.TrimPrefix(p.first, "current=")), 512)
}

func atoiOr(s string, def int64) int64 {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}

// freeKey is the first unused key of prefix0, prefix1 and so on.
func freeKey(conf config, prefix string, limit int) string {
	for i := range limit {
		if _, ok := conf[prefix+strconv.Itoa(i)]; !ok {
			return prefix + strconv.Itoa(i)
		}
	}
	return prefix + strconv.Itoa(limit)
}

// withKey is conf with key taken, so the next freeKey skips it.
func withKey(conf config, key string) config {
	out := make(config, len(conf)+1)
	for k, v := range conf {
		out[k] = v
	}
	out[key] = "pending"
	return out
}
