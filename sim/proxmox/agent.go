package proxmoxsim

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// agentEnabled reads the agent property string, e.g. "1" or "enabled=1,fstrim_cloned_disks=1".
func agentEnabled(conf map[string]string) bool {
	p := parseProperty(conf["agent"], "enabled")
	on, _ := parseBool(p.first)
	return on
}

// agentCommand answers the guest agent commands a control plane uses. The agent
// answers GuestAgentDelay after the VM starts, and not while it is paused; before
// that every command fails with PVE's "QEMU guest agent is not running".
func (s *Simulator) agentCommand(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	if !agentEnabled(v.conf) {
		return nil, failf("No QEMU guest agent configured")
	}
	if !v.running {
		return nil, failf("VM %d is not running", v.vmid)
	}
	delay := s.opts.GuestAgentDelay
	if v.paused || delay < 0 || time.Since(v.started) < delay {
		return nil, failf("QEMU guest agent is not running")
	}
	switch cmd := c.params["command"]; cmd {
	case "ping":
		return map[string]any{}, nil
	case "network-get-interfaces":
		return map[string]any{"result": guestInterfaces(v)}, nil
	case "get-host-name":
		return map[string]any{"result": map[string]any{"host-name": cmp.Or(v.conf["name"], fmt.Sprintf("vm%d", v.vmid))}}, nil
	case "get-osinfo":
		return map[string]any{"result": map[string]any{
			"id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 22.04.5 LTS", "version": "22.04.5 LTS (Jammy Jellyfish)",
			"version-id": "22.04", "kernel-release": "5.15.0-131-generic", "machine": "x86_64",
		}}, nil
	case "info":
		return map[string]any{"result": map[string]any{"version": "6.2.0", "supported_commands": []map[string]any{}}}, nil
	default:
		return nil, failf("Method '%s %s' not implemented", c.r.Method, strings.TrimPrefix(c.r.URL.Path, "/api2/json"))
	}
}

// guestInterfaces is what the agent reports: loopback, then one interface per NIC
// with the static address of its ipconfigN, or one a DHCP server on 10.x would hand
// out, and a link-local IPv6 address from the MAC.
func guestInterfaces(v *vm) []map[string]any {
	nics := nicKeys(v.conf)
	up := uint64(max(time.Since(v.started).Seconds(), 1))
	out := make([]map[string]any, 0, 1+len(nics))
	out = append(out, map[string]any{
		"name": "lo", "hardware-address": "00:00:00:00:00:00",
		"ip-addresses": []map[string]any{
			{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
			{"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
		},
		"statistics": guestStatistics(up*200, up*2, up*200, up*2),
	})
	for i, k := range nics {
		idx := atoiOr(k[3:], 0)
		mac := strings.ToLower(netMAC(v.conf[k]))
		addr, prefix := fmt.Sprintf("10.%d.%d.%d", 10+idx, (v.vmid>>8)&0xff, max(v.vmid&0xff, 2)), 16
		ipc := parseProperty(v.conf[fmt.Sprintf("ipconfig%d", idx)], "ip")
		ip := cmp.Or(ipc.first, ipc.opts["ip"])
		if p, err := netip.ParsePrefix(ip); err == nil && p.Addr().Is4() {
			addr, prefix = p.Addr().String(), p.Bits()
		}
		out = append(out, map[string]any{
			"name": fmt.Sprintf("eth%d", i), "hardware-address": mac,
			"ip-addresses": []map[string]any{
				{"ip-address-type": "ipv4", "ip-address": addr, "prefix": prefix},
				{"ip-address-type": "ipv6", "ip-address": linkLocal(mac), "prefix": 64},
			},
			// The guest's receive is the tap device's transmit (status/current's netin).
			"statistics": guestStatistics(up*1500, up*12, up*600, up*6),
		})
	}
	return out
}

// guestStatistics are the eight counters qemu-guest-agent reports per interface.
func guestStatistics(rxBytes, rxPackets, txBytes, txPackets uint64) map[string]any {
	return map[string]any{
		"rx-bytes": rxBytes, "rx-packets": rxPackets, "rx-errs": 0, "rx-dropped": 0,
		"tx-bytes": txBytes, "tx-packets": txPackets, "tx-errs": 0, "tx-dropped": 0,
	}
}

// linkLocal is the EUI-64 link-local IPv6 address of a MAC.
func linkLocal(mac string) string {
	var b [6]byte
	if _, err := fmt.Sscanf(mac, "%02x:%02x:%02x:%02x:%02x:%02x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]); err != nil {
		return "fe80::1"
	}
	a := netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: b[0] ^ 2, 9: b[1], 10: b[2], 11: 0xff, 12: 0xfe, 13: b[3], 14: b[4], 15: b[5]})
	return a.String()
}
