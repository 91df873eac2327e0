package proxmoxsim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// getVMStatus is status/current: vmstatus with full detail, as qemu-server answers
// it. A running VM also carries what QEMU's monitor reports: per-NIC traffic (nics),
// per-drive I/O (blockstat), the balloon's view of memory (ballooninfo), the
// QEMU build's Proxmox features (proxmox-support), the machine and QEMU version.
// The counters grow with the uptime; they are plausible, not measured.
func (s *Simulator) getVMStatus(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	r := s.vmStatus(v)
	r["qmpstatus"], r["ha"] = v.qmpStatus(), s.haStatus(v.vmid)
	if agentEnabled(v.conf) {
		r["agent"] = 1
	}
	if b := atoiOr(v.conf["balloon"], 0); b > 0 {
		r["balloon_min"], r["shares"] = uint64(b)<<20, atoiOr(v.conf["shares"], 1000)
	}
	if vga := v.conf["vga"]; vga != "" {
		p := parseProperty(vga, "type")
		if strings.HasPrefix(p.first, "virtio") || strings.HasPrefix(p.first, "qxl") {
			r["spice"] = 1
		}
		if cb := p.opts["clipboard"]; cb != "" {
			r["clipboard"] = cb
		}
	}
	if !v.running {
		return r, nil
	}
	up := uint64(max(time.Since(v.started).Seconds(), 1))
	r["running-machine"], r["running-qemu"] = "pc-i440fx-9.2+pve1", "9.2.0"
	r["proxmox-support"] = map[string]any{
		"backup-fleecing": true, "backup-max-workers": true, "pbs-dirty-bitmap": true, "pbs-dirty-bitmap-migration": true,
		"pbs-dirty-bitmap-savevm": true, "pbs-library-version": "1.5.1 (UNKNOWN)", "pbs-masterkey": true, "query-bitmap-info": true,
	}
	nics := map[string]any{}
	var netin, netout uint64
	for _, k := range nicKeys(v.conf) {
		in, out := up*1500, up*600
		nics[fmt.Sprintf("tap%di%s", v.vmid, k[3:])] = map[string]any{"netin": in, "netout": out}
		netin, netout = netin+in, netout+out
	}
	r["nics"], r["netin"], r["netout"] = nics, netin, netout
	blockstat := map[string]any{}
	var read, written uint64
	for _, k := range slices.Sorted(maps.Keys(v.conf)) {
		if !driveKey.MatchString(k) || k == "efidisk0" || k == "tpmstate0" {
			continue
		}
		rd, wr := up*4096*8, up*4096*2
		if parseProperty(v.conf[k], "file").isCDROM() {
			rd, wr = 0, 0
		}
		blockstat[k] = map[string]any{
			"rd_bytes": rd, "wr_bytes": wr, "rd_operations": rd / 4096, "wr_operations": wr / 4096,
			"flush_operations": wr / 4096 / 4, "unmap_bytes": 0, "unmap_operations": 0, "rd_merged": 0, "wr_merged": 0,
			"unmap_merged": 0, "rd_total_time_ns": rd * 10, "wr_total_time_ns": wr * 20, "flush_total_time_ns": wr,
			"unmap_total_time_ns": 0, "wr_highest_offset": wr, "idle_time_ns": 1000000, "failed_rd_operations": 0,
			"failed_wr_operations": 0, "failed_flush_operations": 0, "failed_unmap_operations": 0,
			"invalid_rd_operations": 0, "invalid_wr_operations": 0, "invalid_flush_operations": 0,
			"invalid_unmap_operations": 0, "account_invalid": true, "account_failed": true, "timed_stats": []any{},
		}
		read, written = read+rd, written+wr
	}
	r["blockstat"], r["diskread"], r["diskwrite"] = blockstat, read, written
	// A balloon device is there unless balloon is 0; its guest driver reports
	// memory use.
	if v.conf["balloon"] != "0" {
		total := v.memoryBytes()
		free := total / 2
		r["balloon"], r["freemem"], r["mem"] = total, free, total-free
		r["ballooninfo"] = map[string]any{
			"actual": total, "max_mem": total, "total_mem": total, "free_mem": free, "mem_swapped_in": 0, "mem_swapped_out": 0,
			"major_page_faults": 120, "minor_page_faults": up * 1000, "last_update": time.Now().Unix(),
		}
	}
	return r, nil
}

// nicKeys are a config's NIC keys, net0 first.
func nicKeys(conf map[string]string) []string {
	var nics []string
	for k := range conf {
		if netPattern.MatchString(k) {
			nics = append(nics, k)
		}
	}
	slices.SortFunc(nics, func(a, b string) int { return atoiOr(a[3:], 0) - atoiOr(b[3:], 0) })
	return nics
}

// hasSerial is conf_has_serial: a serial port is configured.
func hasSerial(conf map[string]string) bool {
	for i := range 4 {
		if conf[fmt.Sprintf("serial%d", i)] != "" {
			return true
		}
	}
	return false
}
