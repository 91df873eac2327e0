package proxmoxsim

import (
	"cmp"
	"crypto/sha1" //nolint:gosec // cloud-init's instance-id is PVE's SHA1 of the user and network data
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// getCloudinit is GET cloudinit: the cloud-init keys a VM has, with the values the
// current cloud-init drive was made from. The simulator makes the drive's content
// from the config whenever it is read, so nothing is ever pending.
func (s *Simulator) getCloudinit(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, k := range cloudinitKeys {
		val := v.conf[k]
		if val == "" {
			continue
		}
		if k == "cipassword" {
			val = "**********"
		}
		out = append(out, map[string]any{"key": k, "value": val})
	}
	return out, nil
}

// getCloudinitDump is GET cloudinit/dump?type=user|network|meta: the NoCloud
// user-data, network-config or meta-data qemu-server makes from the VM's ci* keys,
// ipconfigN and NICs. cicustom snippets do not count here, as in PVE. The password
// shows to root@pam only: PVE checks VM.Config.Cloudinit on the literal path
// /vms/{vmid}, which ACL entries on a VM's own path do not reach.
func (s *Simulator) getCloudinitDump(c *call) (any, error) {
	typ, ok := c.params["type"]
	if !ok {
		return nil, missing("type")
	}
	if !slices.Contains([]string{"user", "network", "meta"}, typ) {
		return nil, paramErrorf("type", "value '%s' does not have a value in the enumeration 'user, network, meta'", typ)
	}
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "user":
		return cloudinitUserData(v, !s.allowed(c, "/vms/{vmid}", "VM.Config.Cloudinit")), nil
	case "network":
		return nocloudNetwork(v.conf)
	}
	network, err := nocloudNetwork(v.conf)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(cloudinitUserData(v, false) + network)) //nolint:gosec // see the import
	return "instance-id: " + hex.EncodeToString(sum[:]) + "\n", nil
}

// cloudinitUserData is qemu-server's cloudinit_userdata.
func cloudinitUserData(v *vm, maskPassword bool) string {
	hostname, fqdn := v.conf["name"], ""
	if hostname == "" {
		hostname = fmt.Sprintf("VM%d", v.vmid)
	}
	switch {
	case strings.Contains(hostname, "."):
		fqdn = hostname
		hostname, _, _ = strings.Cut(hostname, ".")
	case v.conf["searchdomain"] != "":
		fqdn = hostname + "." + v.conf["searchdomain"]
	default:
		fqdn = hostname
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#cloud-config\nhostname: %s\nmanage_etc_hosts: true\nfqdn: %s\n", hostname, fqdn)
	user, hasUser := v.conf["ciuser"]
	if hasUser {
		fmt.Fprintf(&b, "user: %s\n", user)
		if user == "root" {
			b.WriteString("disable_root: False\n")
		}
	}
	if pw, ok := v.conf["cipassword"]; ok {
		if maskPassword {
			pw = "**********"
		}
		fmt.Fprintf(&b, "password: %s\n", pw)
	}
	if keys, ok := v.conf["sshkeys"]; ok {
		if k, err := url.PathUnescape(keys); err == nil {
			keys = k
		}
		b.WriteString("ssh_authorized_keys:\n")
		for _, k := range strings.Split(keys, "\n") {
			if k = strings.TrimRight(k, "\r"); strings.TrimSpace(k) != "" {
				fmt.Fprintf(&b, "  - %s\n", k)
			}
		}
	}
	b.WriteString("chpasswd:\n  expire: False\n")
	if !hasUser || user != "root" {
		b.WriteString("users:\n  - default\n")
	}
	if up, ok := v.conf["ciupgrade"]; !ok || up != "0" {
		b.WriteString("package_upgrade: true\n")
	}
	return b.String()
}

// nocloudNetwork is qemu-server's nocloud_network: network config version 1, one
// physical entry per NIC with an ipconfigN, then the name servers (the simulated
// host's resolv.conf has none, so the entry is empty unless nameserver and
// searchdomain are set).
func nocloudNetwork(conf map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("version: 1\nconfig:\n")
	nics := nicKeys(conf)
	// PVE sorts the keys as strings: net10 before net2.
	slices.Sort(nics)
	for _, k := range nics {
		id := k[3:]
		ipc := conf["ipconfig"+id]
		if ipc == "" {
			continue
		}
		mac := strings.ToLower(netMAC(conf[k]))
		if mac == "" {
			return "", failf("network interface '%s' has no mac address", k)
		}
		p := parseProperty(ipc, "ip")
		fmt.Fprintf(&b, "    - type: physical\n      name: eth%s\n      mac_address: '%s'\n      subnets:\n", id, mac)
		if ip := cmp.Or(p.first, p.opts["ip"]); ip != "" {
			if ip == "dhcp" {
				b.WriteString("      - type: dhcp4\n")
			} else {
				addr, mask := splitIPv4(ip)
				fmt.Fprintf(&b, "      - type: static\n        address: '%s'\n        netmask: '%s'\n", addr, mask)
				if gw := p.opts["gw"]; gw != "" {
					fmt.Fprintf(&b, "        gateway: '%s'\n", gw)
				}
			}
		}
		if ip := p.opts["ip6"]; ip != "" {
			switch ip {
			case "dhcp":
				b.WriteString("      - type: dhcp6\n")
			case "auto":
				b.WriteString("      - type: ipv6_slaac\n")
			default:
				fmt.Fprintf(&b, "      - type: static6\n        address: '%s'\n", ip)
				if gw := p.opts["gw6"]; gw != "" {
					fmt.Fprintf(&b, "        gateway: '%s'\n", gw)
				}
			}
		}
	}
	b.WriteString("    - type: nameserver\n")
	if ns := strings.Fields(conf["nameserver"]); len(ns) > 0 {
		b.WriteString("      address:\n")
		for _, n := range ns {
			fmt.Fprintf(&b, "      - '%s'\n", n)
		}
	}
	if sd := strings.Fields(conf["searchdomain"]); len(sd) > 0 {
		b.WriteString("      search:\n")
		for _, d := range sd {
			fmt.Fprintf(&b, "      - '%s'\n", d)
		}
	}
	return b.String(), nil
}

// splitIPv4 is split_ip4: an address and the netmask of its prefix length.
func splitIPv4(cidr string) (addr, mask string) {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil || !pfx.Addr().Is4() {
		a, _, _ := strings.Cut(cidr, "/")
		return a, ""
	}
	m := net.CIDRMask(pfx.Bits(), 32)
	return pfx.Addr().String(), net.IP(m).String()
}
