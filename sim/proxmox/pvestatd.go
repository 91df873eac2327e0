package proxmoxsim

import (
	"time"
)

// DefaultStatusInterval is how often PVE's pvestatd reports every guest's status to
// the cluster (its update loop's 10 seconds), used when Options.StatusInterval is 0.
const DefaultStatusInterval = 10 * time.Second

// reportedFields are the fields of a guest's /cluster/resources entry that come from
// pvestatd's reports (the RRD data pve-manager's extract_vm_stats reads): the name,
// status and template flag lag behind the config by up to a status interval, and a
// guest not reported yet has none of them but status unknown. The VMID, node and pool
// (pmxcfs's vmlist and user.cfg) and the config's lock and tags
// (get_guest_config_properties) are current.
var reportedFields = []string{"name", "status", "template", "uptime", "maxcpu", "cpu", "maxmem", "mem", "maxdisk", "disk", "netin", "netout", "diskread", "diskwrite"}

// statusInterval is Options.StatusInterval; 0 when reports are immediate.
func (s *Simulator) statusInterval() time.Duration {
	switch i := s.opts.StatusInterval; {
	case i == 0:
		return DefaultStatusInterval
	case i < 0:
		return 0
	default:
		return i
	}
}

// startPvestatd makes the first round of reports, as a cluster that has run for a
// while has them for the guests it starts with, and then one round every status
// interval. Every node reports at the same moment, where PVE's nodes each keep
// their own phase.
func (s *Simulator) startPvestatd() {
	s.reportAll()
	interval := s.statusInterval()
	if interval == 0 {
		return
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-tick.C:
				s.mu.Lock()
				s.reportAll()
				s.mu.Unlock()
			}
		}
	}()
}

// reportAll is one round of pvestatd on every online node. An offline node reports
// nothing, so its guests keep their last report (and show status unknown).
func (s *Simulator) reportAll() {
	for id, v := range s.vms {
		if n := s.node(v.node); n != nil && n.online {
			s.reports[id] = s.statusReport(v)
		}
	}
}

// statusReport is what pvestatd reports of a guest: qemu-server's vmstatus, whose name
// is "VM <vmid>" for a config without one (a clone in flight).
func (s *Simulator) statusReport(v *vm) map[string]any {
	st := s.vmStatus(v)
	st["maxcpu"], st["template"] = v.cpus(), boolInt(v.conf["template"] == "1")
	r := make(map[string]any, len(reportedFields))
	for _, k := range reportedFields {
		if val, ok := st[k]; ok {
			r[k] = val
		}
	}
	return r
}

// reported is the guest's last report, or its status now when reports are immediate;
// nil before its first one. It is the simulator's own record, for the caller to read,
// not change: the cluster's listing reads it for every guest, thousands a call.
func (s *Simulator) reported(v *vm) map[string]any {
	if s.statusInterval() == 0 {
		return s.statusReport(v)
	}
	return s.reports[v.vmid]
}

// forget removes a VM from the cluster, with pvestatd's report of it.
func (s *Simulator) forget(vmid int) {
	delete(s.vms, vmid)
	delete(s.reports, vmid)
}

// ReportStatus makes pvestatd report every guest's status now, as its next round
// would, for tests that need the cluster's listing up to date at a given moment.
func (s *Simulator) ReportStatus() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reportAll()
}
