package proxmoxsim

import (
	"regexp"
)

// What every simulated node has: 16 CPUs, 64 GiB, up for a day.
const (
	nodeCPUs   = 16
	nodeMemory = 64 << 30
	nodeUptime = 86400
)

var nodeNamePattern = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)

// nodeMemUsed is a node's memory in use: a base for the host plus its running guests.
func (s *Simulator) nodeMemUsed(name string) uint64 {
	used := uint64(2 << 30)
	for _, v := range s.vms {
		if v.node == name && v.running {
			used += v.memoryBytes()
		}
	}
	return used
}

func (s *Simulator) getNodes(*call) (any, error) {
	out := make([]map[string]any, 0, len(s.nodes))
	for _, n := range s.nodes {
		r := s.nodeResource(n)
		delete(r, "cgroup-mode")
		r["ssl_fingerprint"] = "5A:3C:0E:9B:11:D2:7F:40:A6:8E:21:C4:93:6B:0D:F8:12:77:AB:CD:EF:01:23:45:67:89:9A:BC:DE:F0:11:22"
		out = append(out, r)
	}
	return out, nil
}

func (s *Simulator) getNodeStatus(c *call) (any, error) {
	return map[string]any{
		"uptime": nodeUptime, "idle": 0, "wait": 0.001, "cpu": 0.02,
		// PVE sends the load average as strings and the CPU clock as a string.
		"loadavg":    []string{"0.12", "0.20", "0.18"},
		"kversion":   "Linux 6.8.12-9-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-9 (2025-03-16T19:18Z) x86_64",
		"pveversion": "pve-manager/" + pveVersion + "/" + pveRepoID,
		"cpuinfo": map[string]any{
			"cpus": nodeCPUs, "cores": nodeCPUs / 2, "sockets": 1, "model": "QEMU Virtual CPU version 2.5+",
			"mhz": "2400.000", "hvm": "1", "user_hz": 100, "flags": "fpu vme de pse tsc msr pae mce",
		},
		"memory":    map[string]any{"total": nodeMemory, "used": s.nodeMemUsed(c.node), "free": nodeMemory - s.nodeMemUsed(c.node)},
		"swap":      map[string]any{"total": 8 << 30, "used": 0, "free": 8 << 30},
		"rootfs":    map[string]any{"total": 100 << 30, "used": 8 << 30, "free": 92 << 30, "avail": 87 << 30},
		"ksm":       map[string]any{"shared": 0},
		"boot-info": map[string]any{"mode": "efi", "secureboot": 0},
	}, nil
}

func (s *Simulator) getNodeVersion(c *call) (any, error) {
	return s.getVersion(c)
}

// interfaces are a node's network interfaces: one NIC and, on it, the bridges.
func (s *Simulator) interfaces(n *node) []map[string]any {
	out := make([]map[string]any, 0, 1+len(n.bridges))
	out = append(out, map[string]any{
		"iface": "eno1", "type": "eth", "method": "manual", "method6": "manual", "families": []string{"inet"},
		"active": 1, "exists": 1, "priority": 3,
	})
	for i, b := range n.bridges {
		r := map[string]any{
			"iface": b, "type": "bridge", "method": "manual", "method6": "manual", "families": []string{"inet"},
			"active": 1, "autostart": 1, "bridge_ports": "", "bridge_stp": "off", "bridge_fd": "0", "priority": 4 + i,
		}
		if i == 0 {
			r["bridge_ports"], r["method"] = "eno1", "static"
			r["address"], r["netmask"], r["cidr"], r["gateway"] = n.ip, "24", n.ip+"/24", "192.0.2.1"
		}
		out = append(out, r)
	}
	return out
}

// getNetwork lists a node's interfaces; ?type=bridge or any_bridge keeps bridges.
func (s *Simulator) getNetwork(c *call) (any, error) {
	ifaces := s.interfaces(s.node(c.node))
	out := make([]map[string]any, 0, len(ifaces))
	for _, r := range ifaces {
		switch c.params["type"] {
		case "", r["type"]:
		case "any_bridge":
			if r["type"] != "bridge" {
				continue
			}
		default:
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Simulator) getNetworkIface(c *call) (any, error) {
	for _, r := range s.interfaces(s.node(c.node)) {
		if r["iface"] == c.params["iface"] {
			return r, nil
		}
	}
	return nil, failf("network interface '%s' does not exist", c.params["iface"])
}
