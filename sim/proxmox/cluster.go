package proxmoxsim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Version of Proxmox VE the simulator answers as.
const (
	pveVersion = "8.4.1"
	pveRelease = "8.4"
	pveRepoID  = "2a5fa54a8503f96d"
)

// node is one cluster member.
type node struct {
	name    string
	id      int
	ip      string
	online  bool
	bridges []string
}

// build makes the cluster that o describes.
func (s *Simulator) build(o Options) error {
	names := o.Nodes
	if len(names) == 0 {
		names = []string{"pve1", "pve2"}
	}
	bridges := o.Bridges
	if bridges == nil {
		bridges = []string{"vmbr0"}
	}
	for i, name := range names {
		if !nodeNamePattern.MatchString(name) || s.node(name) != nil {
			return fmt.Errorf("invalid or repeated node name %q", name)
		}
		s.nodes = append(s.nodes, &node{name: name, id: i + 1, ip: fmt.Sprintf("192.0.2.%d", 11+i), online: true, bridges: slices.Clone(bridges)})
	}
	storages := o.Storages
	if storages == nil {
		storages = DefaultStorages()
	}
	for _, st := range storages {
		if st.Name == "" || s.storage(st.Name) != nil {
			return fmt.Errorf("invalid or repeated storage name %q", st.Name)
		}
		s.storages = append(s.storages, &storage{Storage: st})
	}
	for _, p := range o.Pools {
		s.pools[p] = ""
	}
	s.users = map[string]string{s.Username: s.Password}
	maps.Copy(s.users, o.Users)
	s.tokens = map[string]string{s.TokenID: s.TokenSecret}
	maps.Copy(s.tokens, o.Tokens)
	templates := o.Templates
	if templates == nil {
		templates = map[string]string{DefaultTemplate: names[0]}
	}
	for i, name := range slices.Sorted(maps.Keys(templates)) {
		if err := s.makeTemplate(FirstTemplateVMID+i, name, cmp.Or(templates[name], names[0])); err != nil {
			return err
		}
	}
	return nil
}

// entry is the node serving the API: requests for other nodes are forwarded.
func (s *Simulator) entry() *node { return s.nodes[0] }

func (s *Simulator) node(name string) *node {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// quorate reports whether the cluster has quorum: unless SetQuorate took it away, as
// long as no more than half its nodes are offline. Corosync wants more than half the
// votes; the simulator counts as a two-node cluster with two_node set does, so one node
// of two going offline keeps the other writable.
func (s *Simulator) quorate() bool {
	if s.quorumLost {
		return false
	}
	offline := 0
	for _, n := range s.nodes {
		if !n.online {
			offline++
		}
	}
	return offline*2 <= len(s.nodes)
}

// checkQuorum is PVE's check_cfs_quorum, which create_vm, clone_vm and vm_start make
// before anything else: 500 "cluster not ready - no quorum?".
func (s *Simulator) checkQuorum() error {
	if !s.quorate() {
		return failf("cluster not ready - no quorum?")
	}
	return nil
}

// checkWritable is how writing a VM's config fails without quorum: pmxcfs makes
// /etc/pve read-only, and PVE's file_set_contents cannot open its temporary file.
func (s *Simulator) checkWritable(v *vm) error {
	if !s.quorate() {
		return failf("unable to open file '/etc/pve/nodes/%s/qemu-server/%d.conf.tmp.%d' - Permission denied", v.node, v.vmid, s.pid)
	}
	return nil
}

// SetQuorate takes the cluster's quorum away (false), as a corosync network failure
// does while every node still answers, or gives it back (true, the default: the
// cluster is then quorate while no more than half its nodes are offline). Without
// quorum, creating, cloning and starting VMs fail with "cluster not ready - no
// quorum?" and changing or destroying them fails writing their config.
func (s *Simulator) SetQuorate(quorate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quorumLost = !quorate
}

func (s *Simulator) getVersion(*call) (any, error) {
	return map[string]any{"version": pveVersion, "release": pveRelease, "repoid": pveRepoID}, nil
}

func (s *Simulator) getClusterStatus(*call) (any, error) {
	out := make([]map[string]any, 0, 1+len(s.nodes))
	out = append(out, map[string]any{
		"type": "cluster", "id": "cluster", "name": ClusterName, "nodes": len(s.nodes),
		"quorate": boolInt(s.quorate()), "version": len(s.nodes) + 1,
	})
	for _, n := range s.nodes {
		out = append(out, map[string]any{
			"type": "node", "id": "node/" + n.name, "name": n.name, "nodeid": n.id, "ip": n.ip,
			"online": boolInt(n.online), "local": boolInt(n == s.entry()), "level": "",
		})
	}
	return out, nil
}

// getNextID is /cluster/nextid: the lowest free VMID from 100, as a string (PVE's
// answer is a JSON string although the schema says integer), or, with vmid, that
// VMID if it is free.
func (s *Simulator) getNextID(c *call) (any, error) {
	if v, ok := c.params["vmid"]; ok {
		id, err := parseVMID(v, "vmid")
		if err != nil {
			return nil, err
		}
		if s.vms[id] != nil {
			return nil, paramErrorf("vmid", "VM %d already exists", id)
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; id < 1000000; id++ {
		if s.vms[id] == nil {
			return strconv.Itoa(id), nil
		}
	}
	return nil, failf("unable to get any free VMID in range [100, 1000000]")
}

// getClusterResources lists nodes, guests, storages and pools; ?type filters on
// node, vm, storage or pool.
func (s *Simulator) getClusterResources(c *call) (any, error) {
	want := c.params["type"]
	if want != "" && !slices.Contains([]string{"vm", "storage", "node", "sdn", "pool"}, want) {
		return nil, paramErrorf("type", "value '%s' does not have a value in the enumeration 'vm, storage, node, sdn, pool'", want)
	}
	var out []map[string]any
	if want == "" || want == "node" {
		for _, n := range s.nodes {
			out = append(out, s.nodeResource(n))
		}
	}
	if want == "" || want == "vm" {
		for _, id := range slices.Sorted(maps.Keys(s.vms)) {
			out = append(out, s.vmResource(s.vms[id]))
		}
	}
	if want == "" || want == "storage" {
		for _, n := range s.nodes {
			for _, st := range s.storages {
				if st.availableOn(n.name) {
					out = append(out, s.storageResource(n, st))
				}
			}
		}
	}
	if want == "" || want == "pool" {
		for _, p := range slices.Sorted(maps.Keys(s.pools)) {
			out = append(out, map[string]any{"id": "/pool/" + p, "type": "pool", "pool": p})
		}
	}
	return orEmpty(out), nil
}

func (s *Simulator) nodeResource(n *node) map[string]any {
	r := map[string]any{"id": "node/" + n.name, "type": "node", "node": n.name, "level": "", "status": "offline"}
	if n.online {
		maps.Copy(r, map[string]any{
			"status": "online", "maxcpu": nodeCPUs, "maxmem": nodeMemory, "mem": s.nodeMemUsed(n.name),
			"cpu": 0.02, "uptime": nodeUptime, "maxdisk": 100 << 30, "disk": 8 << 30, "cgroup-mode": 2,
		})
	}
	return r
}

func (s *Simulator) storageResource(n *node, st *storage) map[string]any {
	used := s.storageUsed(n.name, st)
	r := map[string]any{
		"id": "storage/" + n.name + "/" + st.Name, "type": "storage", "storage": st.Name, "node": n.name,
		"status": "available", "content": st.contentString(), "plugintype": st.Type, "shared": boolInt(st.Shared),
		"maxdisk": st.size(), "disk": used,
	}
	if !n.online {
		r = map[string]any{"id": r["id"], "type": "storage", "storage": st.Name, "node": n.name, "status": "unknown"}
	}
	return r
}

// getClusterTasks lists what each node broadcasts of its tasks, as PVE does: its
// running tasks and its latest 25 ended ones, newest first, with the oldest dropped
// until the node's list is under 32 KiB of JSON (PVE::Cluster::broadcast_tasklist;
// pmxcfs takes no larger status). On a node running many tasks the oldest running
// ones are thus not listed: only the node's own task list (getNodeTasks) has them all.
func (s *Simulator) getClusterTasks(*call) (any, error) {
	byNode := map[string][]*task{}
	ended := map[string]int{}
	for i := len(s.tasks) - 1; i >= 0; i-- {
		t := s.tasks[i]
		if !t.running {
			if ended[t.upid.Node] == maxListedEndedTasks {
				continue
			}
			ended[t.upid.Node]++
		}
		byNode[t.upid.Node] = append(byNode[t.upid.Node], t)
	}
	out := []map[string]any{}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		tasks := byNode[node]
		slices.SortStableFunc(tasks, func(a, b *task) int { return b.start.Compare(a.start) })
		list := make([]map[string]any, 0, len(tasks))
		size := len("[]")
		for _, t := range tasks {
			e := t.listEntry()
			b, err := json.Marshal(e)
			if err != nil {
				return nil, err
			}
			if size+len(b)+len(",") >= maxTaskListBytes {
				break // this one and every older one are dropped
			}
			list, size = append(list, e), size+len(b)+len(",")
		}
		out = append(out, list...)
	}
	return out, nil
}

// What a node broadcasts of its tasks (getClusterTasks).
const (
	maxListedEndedTasks = 25
	maxTaskListBytes    = 32 * 1024
)

func (s *Simulator) getPools(c *call) (any, error) {
	if id := c.params["poolid"]; id != "" {
		return s.getPool(&call{params: map[string]string{"poolid": id, "type": c.params["type"]}})
	}
	out := []map[string]any{}
	for _, p := range slices.Sorted(maps.Keys(s.pools)) {
		out = append(out, map[string]any{"poolid": p, "comment": s.pools[p]})
	}
	return out, nil
}

// getPool answers both /pools/{poolid} (an object) and /pools?poolid= (a list of
// one), as PVE 8 does.
func (s *Simulator) getPool(c *call) (any, error) {
	id := c.params["poolid"]
	comment, ok := s.pools[id]
	if !ok {
		return nil, failf("pool '%s' does not exist", id)
	}
	members := []map[string]any{}
	for _, vmid := range slices.Sorted(maps.Keys(s.vms)) {
		if v := s.vms[vmid]; v.pool == id && (c.params["type"] == "" || c.params["type"] == "qemu") {
			members = append(members, s.vmResource(v))
		}
	}
	pool := map[string]any{"poolid": id, "comment": comment, "members": members}
	if c.template == "GET /pools/{poolid}" {
		delete(pool, "poolid")
		return pool, nil
	}
	return []map[string]any{pool}, nil
}

func (s *Simulator) postPool(c *call) (any, error) {
	id := c.params["poolid"]
	if id == "" {
		return nil, missing("poolid")
	}
	if _, ok := s.pools[id]; ok {
		return nil, failf("create pool failed: pool '%s' already exists", id)
	}
	s.pools[id] = c.params["comment"]
	return nil, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orEmpty keeps an empty list a JSON list: PVE answers [] where Go would write null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func parseVMID(v, param string) (int, error) {
	id, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || id < 100 || id > 999999999 {
		return 0, paramErrorf(param, "invalid format - value does not look like a valid VM ID")
	}
	return id, nil
}

// requiredVMID reads a VMID parameter that must be there.
func requiredVMID(c *call, param string) (int, error) {
	raw, ok := c.params[param]
	if !ok {
		return 0, missing(param)
	}
	return parseVMID(raw, param)
}
