package proxmox

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// cloneMemory is how long a session remembers a clone task it started: long enough
// that a machine waiting in a backlog for its Create still tells this session's clones
// for other machines apart among the tasks started since it was created (see
// pendingClone). Forgetting one early costs a listing, never a duplicate.
const cloneMemory = time.Hour

// cloneSearch is what pendingClone found of the clones that may be making the
// machine's VM.
type cloneSearch struct {
	// running is the UPID of such a clone that runs, to wait for; "" when none does.
	running string
	// ended is true when none runs, though a VM of the listing was locked by a clone
	// this session did not start: that clone has ended since the listing was read,
	// and its VM, if it is the machine's, may be missing from it, so the cluster is
	// listed again.
	ended bool
}

// pendingClone looks, when the machine's VM is not in the listing all, for a clone
// that may be making it. A VM locked by a clone carries no name nor description yet,
// so a provider that crashed after starting a clone cannot tell its clone from
// another's: any qmclone task running since the machine was created (of the machine's
// template, or of any template while the machine is being deleted, as its image may
// have been resolved anew since) may be it, except those this session started for
// other machines. One that runs is waited for rather than cloned again or left behind
// by a deletion. When none runs, the clone that locked a VM of the listing has ended
// since, its VM perhaps the machine's and named now: the caller lists again. It costs
// a read of the running clones of the templates' nodes (a clone runs on its source's
// node), made only while some VM of the listing is locked by a clone this session did
// not start (see ownClones). Each node's own list of running tasks is read, not
// /cluster/tasks: PVE cuts that to 32 KiB of running and recent tasks, so on a busy
// cluster it may leave out the very clone to wait for.
func (s *session) pendingClone(ctx context.Context, m *providersdk.Machine, all []pve.Resource) (cloneSearch, error) {
	var locked []int
	for _, r := range all {
		if r.Lock == "clone" {
			locked = append(locked, r.VMID)
		}
	}
	if len(locked) == 0 {
		return cloneSearch{}, nil // every clone started before the listing had ended: its VM is there
	}
	if found, ok := s.ownClones(m.UID, locked); ok {
		return found, nil
	}
	var since int64
	var nodes []string
	source := ""
	if m.Object != nil {
		if c := m.Object.GetCreationTimestamp(); !c.IsZero() {
			// PVE's clock and the API server's may differ a little.
			since = c.Add(-time.Minute).Unix()
		}
		if m.Object.GetDeletionTimestamp() == nil {
			if tmpl, err := s.template(ctx, m, all); err == nil {
				source, nodes = strconv.Itoa(tmpl.vmid), []string{tmpl.node}
			}
		}
	}
	if source == "" {
		nodes = templateNodes(all)
	}
	mine := s.clonedFor(m.UID)
	for _, node := range nodes {
		tasks, err := s.api.RunningTasks(ctx, node, "qmclone")
		if err != nil {
			return cloneSearch{}, err
		}
		for _, t := range tasks {
			if !t.Running() || t.StartTime < since || (source != "" && t.ID != source) {
				continue
			}
			owner, ok := s.cloneOwner(t.UPID)
			if ok && owner != m.UID {
				continue // this session's clone for another machine
			}
			if !ok && mine {
				// Another client's: this session cloned for the machine after it had found
				// no clone of an earlier session in flight, so this one is not the machine's.
				continue
			}
			return cloneSearch{running: t.UPID}, nil
		}
	}
	return cloneSearch{ended: true}, nil
}

// templateNodes are the nodes that hold a template of the listing all, each once.
func templateNodes(all []pve.Resource) []string {
	var nodes []string
	for _, r := range all {
		if r.Template && !slices.Contains(nodes, r.Node) {
			nodes = append(nodes, r.Node)
		}
	}
	return nodes
}

// ownClones tells what pendingClone would find when every VM of the listing locked by a
// clone (the VMIDs locked) is one this session is cloning onto, with no need of the
// nodes' tasks: the clone of the machine uid among them, if any, runs; the others
// make other machines' VMs. It reports false when a locked VM is not this session's:
// it may be a crashed provider's clone for the machine. PVE refuses a clone onto a
// VMID that has a config, so the VM locked on a VMID this session cloned onto is its
// clone, unless that VM has been destroyed and the VMID taken by another client within
// cloneMemory; on a large cluster, where clones of its own are always in flight, this
// saves reading the nodes' tasks for every new machine.
func (s *session) ownClones(uid k8stypes.UID, locked []int) (cloneSearch, bool) {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	// The latest clone onto each VMID: a VMID may have been another machine's clone
	// that failed, then uid's.
	latest := make(map[int]string, len(locked))
	for upid, c := range s.clones {
		if prev, ok := latest[c.vmid]; !ok || s.clones[prev].at.Before(c.at) {
			latest[c.vmid] = upid
		}
	}
	var found cloneSearch
	for _, vmid := range locked {
		upid, ok := latest[vmid]
		if !ok {
			return cloneSearch{}, false
		}
		if s.clones[upid].uid == uid {
			found.running = upid
		}
	}
	return found, true
}

// startedClone is a clone task this session started: the machine it makes a VM for,
// the VMID it makes, and when it started, on the driver's clock.
type startedClone struct {
	uid  k8stypes.UID
	vmid int
	at   time.Time
}

// cloneStarted records a clone task this session started for the machine uid onto
// vmid, and forgets those older than cloneMemory.
func (s *session) cloneStarted(upid string, uid k8stypes.UID, vmid int) {
	now := s.driver.now()
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	maps.DeleteFunc(s.clones, func(_ string, c startedClone) bool { return now.Sub(c.at) > cloneMemory })
	s.clones[upid] = startedClone{uid: uid, vmid: vmid, at: now}
}

// clonedFor reports whether this session started a clone for the machine uid.
func (s *session) clonedFor(uid k8stypes.UID) bool {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	for _, c := range s.clones {
		if c.uid == uid {
			return true
		}
	}
	return false
}

// othersVMIDs are the VMIDs this session cloned onto for machines other than uid.
func (s *session) othersVMIDs(uid k8stypes.UID) map[int]bool {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	out, mine := map[int]bool{}, map[int]bool{}
	for _, c := range s.clones {
		if c.uid != uid {
			out[c.vmid] = true
		} else {
			mine[c.vmid] = true
		}
	}
	// A VMID may have been another machine's clone that failed, then this one's.
	maps.DeleteFunc(out, func(vmid int, _ bool) bool { return mine[vmid] })
	return out
}

// cloneAsked records that a session of the driver is about to ask PVE for a clone for
// the machine uid: from then on no session of this process answers a lookup of the
// machine's VM from a listing that may predate the clone (see reusesListing). Any
// listing reused after cloneMemory started long after PVE answered the clone.
func (d *Driver) cloneAsked(uid k8stypes.UID) {
	d.asked.remember(uid, struct{}{}, d.now())
}

// askedClone reports whether a session of the driver asked PVE for a clone for the
// machine uid within cloneMemory.
func (d *Driver) askedClone(uid k8stypes.UID) bool {
	_, ok := d.asked.recall(uid, d.now())
	return ok
}

// memory remembers a value per key for cloneMemory. It forgets older ones at most
// once a minute, so that remembering costs no walk of all it holds. The zero memory
// is empty and ready.
type memory[K comparable, V any] struct {
	mu     sync.Mutex
	items  map[K]remembered[V]
	pruned time.Time
}

// remembered is a value a memory holds, and when it was remembered.
type remembered[V any] struct {
	value V
	at    time.Time
}

// remember holds v for k from now.
func (m *memory[K, V]) remember(k K, v V, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.items == nil {
		m.items = map[K]remembered[V]{}
	}
	if now.Sub(m.pruned) > time.Minute {
		maps.DeleteFunc(m.items, func(_ K, r remembered[V]) bool { return now.Sub(r.at) > cloneMemory })
		m.pruned = now
	}
	m.items[k] = remembered[V]{value: v, at: now}
}

// recall is the value held for k, unless it is older than cloneMemory.
func (m *memory[K, V]) recall(k K, now time.Time) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.items[k]
	if !ok || now.Sub(r.at) > cloneMemory {
		var zero V
		return zero, false
	}
	return r.value, true
}

// cloneOwner is the machine a clone task this session started makes a VM for.
func (s *session) cloneOwner(upid string) (k8stypes.UID, bool) {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	c, ok := s.clones[upid]
	return c.uid, ok
}
