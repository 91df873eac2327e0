package proxmoxsim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
)

// haResource is a guest the HA manager manages, as /etc/pve/ha/resources.cfg holds
// it. The simulator has no HA manager: it records the resource and reports it, but
// does not start, stop or move the guest.
type haResource struct {
	state, group, comment string
	maxRestart            *int
	maxRelocate           *int
}

var sidPattern = regexp.MustCompile(`^(\S+):(\S+)$`)

// parseSID is PVE::HA::Config::parse_sid: vm:100, or a bare VMID of an existing guest.
// The simulator has only VMs, so any type but vm does not exist.
func (s *Simulator) parseSID(sid string) (int, error) {
	if id, err := strconv.Atoi(sid); err == nil && sid != "" && sid[0] != '+' && sid[0] != '-' {
		if s.vms[id] == nil {
			return 0, failf("unable do detect SID from VMID - VM/CT %d does not exist", id)
		}
		return id, nil
	}
	m := sidPattern.FindStringSubmatch(sid)
	if m == nil {
		return 0, failf("unable to parse service id '%s'", sid)
	}
	id, err := strconv.Atoi(m[2])
	if m[1] != "vm" || err != nil {
		return 0, failf("no such resource '%s'", sid)
	}
	return id, nil
}

func (r *haResource) config(vmid int) map[string]any {
	out := map[string]any{"sid": fmt.Sprintf("vm:%d", vmid), "type": "vm", "state": r.state, "digest": "5d41402abc4b2a76b9719d911017c592ae1a6f0b"}
	for k, v := range map[string]string{"group": r.group, "comment": r.comment} {
		if v != "" {
			out[k] = v
		}
	}
	if r.maxRestart != nil {
		out["max_restart"] = *r.maxRestart
	}
	if r.maxRelocate != nil {
		out["max_relocate"] = *r.maxRelocate
	}
	return out
}

// haStatus is get_service_status, the ha object of a VM's status/current: managed
// 0 for a guest the HA manager does not manage (or ignores).
func (s *Simulator) haStatus(vmid int) map[string]any {
	r := s.ha[vmid]
	if r == nil || r.state == "ignored" {
		return map[string]any{"managed": 0}
	}
	var group any
	if r.group != "" {
		group = r.group
	}
	return map[string]any{"managed": 1, "state": r.state, "group": group}
}

func (s *Simulator) getHAResources(*call) (any, error) {
	out := make([]map[string]any, 0, len(s.ha))
	for _, id := range slices.Sorted(maps.Keys(s.ha)) {
		out = append(out, s.ha[id].config(id))
	}
	return out, nil
}

// getHAResource is GET /cluster/ha/resources/{sid}: the resource, or PVE's 500 "no
// such resource 'vm:100'" for a guest HA does not manage.
func (s *Simulator) getHAResource(c *call) (any, error) {
	id, err := s.parseSID(c.params["sid"])
	if err != nil {
		return nil, err
	}
	r := s.ha[id]
	if r == nil {
		return nil, failf("no such resource 'vm:%d'", id)
	}
	return r.config(id), nil
}

// postHAResource is POST /cluster/ha/resources (ha-manager add): the guest becomes
// HA-managed, with state started unless told.
func (s *Simulator) postHAResource(c *call) (any, error) {
	sid, ok := c.params["sid"]
	if !ok {
		return nil, missing("sid")
	}
	id, err := s.parseSID(sid)
	if err != nil {
		return nil, err
	}
	if t := c.params["type"]; t != "" && t != "vm" {
		return nil, failf("types does not match")
	}
	if s.vms[id] == nil {
		return nil, failf("resource 'vm:%d' does not exist in cluster", id)
	}
	if s.ha[id] != nil {
		return nil, failf("resource ID 'vm:%d' already defined", id)
	}
	r := &haResource{state: "started", group: c.params["group"], comment: c.params["comment"]}
	if st, ok := c.params["state"]; ok {
		if !slices.Contains([]string{"started", "stopped", "enabled", "disabled", "ignored"}, st) {
			return nil, paramErrorf("state", "value '%s' does not have a value in the enumeration 'started, stopped, enabled, disabled, ignored'", st)
		}
		r.state = st
	}
	for param, dst := range map[string]**int{"max_restart": &r.maxRestart, "max_relocate": &r.maxRelocate} {
		if v, ok := c.params[param]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, paramErrorf(param, "type check ('integer') failed - got '%s'", v)
			}
			*dst = &n
		}
	}
	s.ha[id] = r
	return nil, nil
}
