package proxmoxsim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// vm is one QEMU guest. Its config is kept as PVE keeps it, key → string value: the
// values it runs with, and in its [PENDING] section the changes it takes at its next
// start or stop (see pending.go).
type vm struct {
	vmid int
	node string
	conf map[string]string
	// pending are the values waiting for the next power cycle; pendingDelete the keys
	// it removes then, in the order they were asked for.
	pending       map[string]string
	pendingDelete []string
	pool          string
	running       bool
	paused        bool
	started       time.Time
	pid           uint64
}

// VMState is a snapshot of one VM, for tests.
type VMState struct {
	// VMID is the VM's ID.
	VMID int
	// Node is the node the VM is on.
	Node string
	// Name, Pool and Lock are its name, pool and config lock (clone, create,
	// destroyed, suspended…), empty when unset.
	Name, Pool, Lock string
	// Status is running or stopped; QMPStatus also tells paused.
	Status, QMPStatus string
	// Template is true for templates.
	Template bool
	// Config is a copy of its config: the values it runs with.
	Config map[string]string
	// Pending are the values its config's pending section holds for its next start or
	// stop, and PendingDelete the keys that go then; empty when there are none.
	Pending       map[string]string
	PendingDelete []string
}

// VM returns a copy of a VM's config, as the config file holds it: the values it runs
// with, without its pending changes (Pending has those).
func (s *Simulator) VM(vmid int) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return nil, false
	}
	return maps.Clone(v.conf), true
}

// VMs lists every VM, in VMID order.
func (s *Simulator) VMs() []VMState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VMState, 0, len(s.vms))
	for _, id := range slices.Sorted(maps.Keys(s.vms)) {
		v := s.vms[id]
		out = append(out, VMState{
			VMID: id, Node: v.node, Name: v.conf["name"], Pool: v.pool, Lock: v.conf["lock"],
			Status: v.status(), QMPStatus: v.qmpStatus(), Template: v.conf["template"] == "1", Config: maps.Clone(v.conf),
			Pending: maps.Clone(v.pending), PendingDelete: slices.Clone(v.pendingDelete),
		})
	}
	return out
}

// vmOf finds the VM a path names on the node it names; a VM on another node does not
// count, since PVE reads nodes/<node>/qemu-server/<vmid>.conf.
func (s *Simulator) vmOf(c *call) (*vm, error) {
	id, err := parseVMID(c.params["vmid"], "vmid")
	if err != nil {
		return nil, err
	}
	v := s.vms[id]
	if v == nil || v.node != c.node {
		return nil, failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", c.node, id)
	}
	return v, nil
}

func (v *vm) status() string {
	if v.running {
		return "running"
	}
	return "stopped"
}

func (v *vm) qmpStatus() string {
	if v.paused {
		return "paused"
	}
	return v.status()
}

// checkLock is PVE's check_lock: a config lock (clone, create, backup, migrate,
// destroyed, suspended…) refuses changes unless root passes skiplock.
func (v *vm) checkLock(c *call) error {
	if c.params["skiplock"] == "1" {
		if c.user != "root@pam" {
			return paramErrorf("skiplock", "Only root may use this option.")
		}
		return nil
	}
	if lock := v.conf["lock"]; lock != "" {
		return failf("VM is locked (%s)", lock)
	}
	return nil
}

func (v *vm) checkDigest(c *call) error {
	if d := c.params["digest"]; d != "" && d != v.digest() {
		return failf("checksum mismatch (file change by other user?)")
	}
	return nil
}

func (v *vm) cpus() int {
	if n, err := strconv.Atoi(v.conf["vcpus"]); err == nil && n > 0 {
		return n
	}
	return max(atoiOr(v.conf["cores"], 1), 1) * max(atoiOr(v.conf["sockets"], 1), 1)
}

func (v *vm) memoryBytes() uint64 {
	mem := v.conf["memory"]
	if p := parseProperty(mem, "current"); p.first != "" {
		mem = p.first
	}
	return uint64(atoiOr(mem, 512)) << 20
}

// bootDiskSize is maxdisk: the size of the first disk that is not a CD-ROM.
func (s *Simulator) bootDiskSize(v *vm) uint64 {
	for _, bus := range []string{"scsi", "virtio", "sata", "ide"} {
		for i := range 31 {
			p := parseProperty(v.conf[fmt.Sprintf("%s%d", bus, i)], "file")
			if p.first == "" || p.isCDROM() {
				continue
			}
			if size, ok := parseSize(p.opts["size"]); ok {
				return size
			}
		}
	}
	return 0
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// vmStatus is PVE's vmstatus for one VM. template appears only on templates: go-proxmox
// reads any template value but "" as true.
func (s *Simulator) vmStatus(v *vm) map[string]any {
	r := map[string]any{
		"vmid": v.vmid, "name": cmp.Or(v.conf["name"], fmt.Sprintf("VM %d", v.vmid)), "status": v.status(),
		"cpus": v.cpus(), "maxmem": v.memoryBytes(), "maxdisk": s.bootDiskSize(v), "mem": 0, "disk": 0,
		"cpu": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0, "uptime": 0,
	}
	if v.running {
		r["pid"], r["uptime"], r["mem"], r["cpu"] = v.pid, int(time.Since(v.started).Seconds()), v.memoryBytes()/2, 0.01
	}
	for _, k := range []string{"lock", "tags"} {
		if v.conf[k] != "" {
			r[k] = v.conf[k]
		}
	}
	if v.conf["template"] == "1" {
		r["template"] = 1
	}
	if hasSerial(v.conf) {
		r["serial"] = 1
	}
	return r
}

// vmResource is a guest's entry in /cluster/resources and a pool's members, as
// pve-manager's extract_vm_stats makes it: what pmxcfs knows at once (VMID, node,
// pool, and the config's lock and tags), and what pvestatd last reported (see
// statusReport), status unknown before its first report.
func (s *Simulator) vmResource(v *vm) map[string]any {
	rep := s.reported(v)
	r := make(map[string]any, 8+len(rep))
	r["id"], r["vmid"], r["type"], r["node"], r["status"] = "qemu/"+strconv.Itoa(v.vmid), v.vmid, "qemu", v.node, "unknown"
	maps.Copy(r, rep)
	for _, k := range []string{"lock", "tags"} {
		if v.conf[k] != "" {
			r[k] = v.conf[k]
		}
	}
	if v.pool != "" {
		r["pool"] = v.pool
	}
	if n := s.node(v.node); n != nil && !n.online {
		r["status"] = "unknown"
	}
	return r
}

func (s *Simulator) getVMs(c *call) (any, error) {
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.vms)) {
		if v := s.vms[id]; v.node == c.node {
			out = append(out, s.vmStatus(v))
		}
	}
	return out, nil
}

// deleteVM destroys a VM and every volume it owns in a qmdestroy task.
// destroy-unreferenced-disks also removes volumes of its VMID the config does not
// name; purge only matters for backup jobs and HA, which the simulator has not.
func (s *Simulator) deleteVM(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	if v.conf["protection"] == "1" {
		return nil, failf("can't remove VM %d - protection mode enabled", v.vmid)
	}
	if v.running {
		return nil, failf("VM %d is running - destroy failed", v.vmid)
	}
	// PVE makes the other checks in the worker, which holds the config lock: the call
	// answers with a UPID, and the task fails.
	unreferenced := c.params["destroy-unreferenced-disks"] == "1"
	return s.fork(c, "qmdestroy", fmt.Sprint(v.vmid), worker{
		locks: s.configLock(v.vmid),
		begin: func() error {
			if s.vms[v.vmid] != v {
				return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid)
			}
			if err := v.checkLock(c); err != nil {
				return err
			}
			if err := s.baseInUse(v); err != nil {
				return err
			}
			if err := s.checkWritable(v); err != nil {
				return err
			}
			v.conf["lock"] = "destroyed"
			return nil
		},
		finish: func(fail error) error {
			if fail != nil {
				return fail
			}
			if s.vms[v.vmid] != v {
				return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid)
			}
			return s.destroy(v, unreferenced)
		},
	}), nil
}

// baseInUse is destroy_vm's first check: a template whose base volume a linked clone
// still refers to cannot go.
func (s *Simulator) baseInUse(v *vm) error {
	for _, volid := range vmVolumes(v.conf) {
		st, vol := s.findVolume(v.node, volid)
		if vol != nil && vol.parent == "" && strings.Contains(vol.name, "base-") && s.linkedUser(v.node, st, vol.name) != "" {
			return failf("base volume '%s' is still in use by linked cloned", volid)
		}
	}
	return nil
}

func (s *Simulator) destroy(v *vm, unreferenced bool) error {
	if err := s.baseInUse(v); err != nil {
		return err
	}
	for _, volid := range vmVolumes(v.conf) {
		if st, vol := s.findVolume(v.node, volid); vol != nil {
			s.removeVolume(v.node, st, vol.name)
		}
	}
	if unreferenced {
		for _, st := range s.storages {
			if !st.availableOn(v.node) {
				continue
			}
			for name, vol := range s.volumes[storeKey(v.node, st)] {
				if vol.vmid == v.vmid && vol.content == "images" {
					s.removeVolume(v.node, st, name)
				}
			}
		}
	}
	s.forget(v.vmid)
	return nil
}

// linkedUser names a linked clone disk that refers to a base volume, if any.
func (s *Simulator) linkedUser(node string, st *storage, base string) string {
	for name, vol := range s.volumes[storeKey(node, st)] {
		if vol.parent == base {
			return name
		}
	}
	return ""
}
