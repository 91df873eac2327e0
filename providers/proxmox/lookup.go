package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// vmState is what a lookup found of a VM: its listing entry and its config, as the
// driver sees it (see configView), with what PVE holds pending for its next power
// cycle.
type vmState struct {
	pve.Resource
	conf    pve.Config
	pending pve.Pending
}

// observed is what Observe read, handed back in Observation.State to the Create,
// Update or Delete of the same reconcile, which act on it instead of reading PVE
// again.
type observed struct {
	// vm is the machine's VM; nil when there is none.
	vm *vmState
	// power is the VM's power state; running is true when its QEMU process runs
	// (paused included), which Delete stops first.
	power   banlieuev1.PowerState
	running bool
	// guests is the cluster's listing in which the VM was not found, with no clone in
	// flight that may be making it (see pendingClone); nil when the VM was found.
	// Create finds the template in it.
	guests []pve.Resource
}

// stateOf is the observation's record of what Observe read; an error when obs comes
// from elsewhere, which the Reconciler never does.
func stateOf(obs providersdk.Observation, op string) (*observed, error) {
	st, ok := obs.State.(*observed)
	if !ok || st == nil {
		return nil, fmt.Errorf("failed to %s the VM: it needs the Observation that Observe returned in the same reconcile", op)
	}
	return st, nil
}

// location is where a VM is: its node and VMID.
type location struct {
	node string
	vmid int
}

func (l location) known() bool { return l.node != "" && l.vmid > 0 }

// recordedLocation is where the machine's VM is as its status.proxmox says, which
// Observe and Create wrote: the one place a VM's location is kept. The zero location
// when there is none or it cannot be read.
func recordedLocation(m *providersdk.Machine) location {
	var st infrav1.ProxmoxStatus
	if m.Object == nil || m.StatusField("proxmox", &st) != nil {
		return location{}
	}
	return location{node: st.Node, vmid: int(st.VMID)}
}

// find finds the machine's VM. Where the machine's status says its VM is, it reads
// that VM's config alone: one call, whatever the cluster's size. When that is not the
// machine's VM (moved to another node, gone, another VM on the VMID), it lists the
// cluster's guests and looks there, as findIn does; the listing is returned then, and
// nil when the direct read sufficed. A machine whose status records no VM may be looked
// for in a listing read a moment before (reusesListing). A VM not found is nil: the
// listing was read.
func (s *session) find(ctx context.Context, m *providersdk.Machine) (*vmState, []pve.Resource, error) {
	loc := recordedLocation(m)
	if loc.known() {
		vm, err := s.direct(ctx, m, loc)
		if err != nil || vm != nil {
			return vm, nil, err
		}
		if s.destroyedAt(m, loc) {
			return nil, nil, nil
		}
	} else if s.reusesListing(m) {
		all, reused, err := s.api.ResourcesSince(ctx, s.reusableSince())
		switch {
		case err != nil:
			return nil, nil, err
		case !reused:
			vm, err := s.findIn(ctx, all, m)
			return vm, all, err
		case !s.mayBeIn(all, m):
			return nil, all, nil
		}
		// A guest of the listing may be the machine's VM, and may have moved since the
		// listing was read: it is looked for in one made now.
	}
	all, err := s.api.Resources(ctx)
	if err != nil {
		return nil, nil, err
	}
	vm, err := s.findIn(ctx, all, m)
	return vm, all, err
}

// sawDestroyed records that the machine's destroy task upid ended well: its VM, where
// the task says, is gone.
func (s *session) sawDestroyed(m *providersdk.Machine, upid string) {
	if node, vmid, ok := pve.DestroyedVM(upid); ok {
		s.destroyed.remember(m.UID, location{node: node, vmid: vmid}, s.driver.now())
	}
}

// destroyedAt reports whether the machine, being deleted, had its VM at loc destroyed
// by a task this session saw end well: the VM is gone, not moved, and no listing need
// confirm it. A machine not being deleted may be cloned again, and its Create needs
// the listing.
func (s *session) destroyedAt(m *providersdk.Machine, loc location) bool {
	if m.Object == nil || m.Object.GetDeletionTimestamp() == nil {
		return false
	}
	at, ok := s.destroyed.recall(m.UID, s.driver.now())
	return ok && at == loc
}

// listingReuse is how old a listing may be that a lookup of a new machine's VM takes
// instead of listing the cluster again (see reusesListing).
const listingReuse = 5 * time.Second

// listingGrace is how long after a session is made its lookups all list the cluster
// anew: a provider process that held the Provider before this one may have had a
// clone on its way to PVE as it stopped.
const listingGrace = 30 * time.Second

// reusesListing reports whether a lookup of the machine's VM may take a listing read
// before it asked. The machine's status records no VM, and no session of this process
// asked PVE for a clone for it: its VM, if any, was made by a provider process before
// this one, which stopped before the session was made, so every listing the session
// read after its listingGrace holds it. Any other machine waits for a listing that
// starts after it asks, so that its own clone, which PVE answered before, is in it.
// On a cluster of thousands of VMs each listing is large for PVE to build and for the
// provider to read; new machines then share one every listingReuse instead of a
// listing per few machines.
func (s *session) reusesListing(m *providersdk.Machine) bool {
	return !s.driver.askedClone(m.UID)
}

// reusableSince is when a listing a lookup may reuse started at the earliest.
func (s *session) reusableSince() time.Time {
	if t := time.Now().Add(-listingReuse); t.After(s.reuseFrom) {
		return t
	}
	return s.reuseFrom
}

// direct reads the config of the VM at loc and returns it when its description names
// the machine's UID. It returns nil, for the caller to list the cluster, when the VM
// is not there, is a template or is another machine's, or when its node does not
// answer (its VMs may have moved elsewhere). A VM with the machine's tag and another
// UID is an IdentityMismatch, as in findIn.
func (s *session) direct(ctx context.Context, m *providersdk.Machine, loc location) (*vmState, error) {
	conf, pending, err := s.config(ctx, loc.node, loc.vmid)
	if err != nil {
		if ctx.Err() != nil || providersdk.IsUnauthorized(err) || providersdk.IsPermanent(err) ||
			(providersdk.IsUnreachable(err) && !pve.IsNodeUnreachable(err)) {
			return nil, err // PVE itself is not there: the listing would fail alike
		}
		return nil, nil
	}
	if conf == nil || conf["template"] == "1" {
		return nil, nil
	}
	if descriptionUID(conf["description"]) != string(m.UID) {
		if tag := TagPrefix + string(m.UID); slices.Contains(conf.Tags(), tag) {
			return nil, identityMismatch(loc.vmid, conf["name"], tag)
		}
		return nil, nil // the VMID went to another VM
	}
	return &vmState{conf: conf, pending: pending, Resource: pve.Resource{
		VMID: loc.vmid, Node: loc.node, Name: conf["name"], Tags: conf["tags"], Lock: conf["lock"],
	}}, nil
}

// findIn finds the machine's VM on a guest list already read: a guest with its tag or
// its name, confirmed by the UID in its description. The listing's names lag (see
// unreported), so when none matches, the guests whose name the listing does not know
// yet are confirmed the same way, but for clones in flight (pendingClone's concern)
// and the VMs this session cloned for other machines: after a clone has ended, such
// guests are few and briefly there. It returns nil when there is none.
func (s *session) findIn(ctx context.Context, all []pve.Resource, m *providersdk.Machine) (*vmState, error) {
	tag, name := machineMarks(m)
	for _, r := range all {
		tagged, ok := named(r, tag, name)
		if !ok {
			continue
		}
		conf, pending, err := s.config(ctx, r.Node, r.VMID)
		if err != nil {
			return nil, err
		}
		if conf == nil || descriptionUID(conf["description"]) != string(m.UID) {
			if tagged && conf != nil {
				return nil, identityMismatch(r.VMID, r.Name, tag)
			}
			continue // another VM with the name: PVE names need not be unique
		}
		return &vmState{Resource: r, conf: conf, pending: pending}, nil
	}
	for _, r := range s.unnamed(all, m) {
		conf, pending, err := s.config(ctx, r.Node, r.VMID)
		switch {
		case pve.IsNodeUnreachable(err):
			continue // its node is down: the VM cannot be confirmed, nor changed
		case err != nil:
			return nil, err
		case conf == nil || conf["template"] == "1" || descriptionUID(conf["description"]) != string(m.UID):
			continue
		}
		r.Name, r.Lock, r.Tags = conf["name"], conf["lock"], conf["tags"]
		return &vmState{Resource: r, conf: conf, pending: pending}, nil
	}
	return nil, nil
}

// mayBeIn reports whether findIn could find the machine's VM in the listing all,
// without reading a config: a guest has the machine's tag or name, or is one of the
// unnamed it would confirm.
func (s *session) mayBeIn(all []pve.Resource, m *providersdk.Machine) bool {
	tag, name := machineMarks(m)
	for _, r := range all {
		if _, ok := named(r, tag, name); ok {
			return true
		}
	}
	return len(s.unnamed(all, m)) > 0
}

// machineMarks are the tag and the name the machine's VM carries.
func machineMarks(m *providersdk.Machine) (tag, name string) {
	return TagPrefix + string(m.UID), machineVMName(m.Namespace, m.Name)
}

// named reports whether the guest r, not a template, has the machine's tag or its VM's
// name (ok), and whether it has the tag.
func named(r pve.Resource, tag, name string) (tagged, ok bool) {
	tagged = slices.Contains(pve.SplitTags(r.Tags), tag)
	return tagged, !r.Template && (tagged || r.Name == name)
}

// unnamed are the guests of all whose name the listing does not know yet (see
// unreported), but for clones in flight (pendingClone's concern) and the VMs this
// session cloned for machines other than m.
func (s *session) unnamed(all []pve.Resource, m *providersdk.Machine) []pve.Resource {
	var out []pve.Resource
	var others map[int]bool
	for _, r := range all {
		if !unreported(r) || r.Lock == "clone" {
			continue
		}
		if others == nil {
			others = s.othersVMIDs(m.UID)
		}
		if !others[r.VMID] {
			out = append(out, r)
		}
	}
	return out
}

// unreported reports whether the listing does not know a guest's name: PVE's
// /cluster/resources has a guest's name, status and template flag from pvestatd,
// which reports every 10 seconds, so a new guest is listed with status unknown and
// no name until then, and a clone that was still in flight then keeps the name PVE
// gives a config without one, "VM <vmid>", until the next report.
func unreported(r pve.Resource) bool {
	return !r.Template && (r.Name == "" || r.Name == "VM "+strconv.Itoa(r.VMID))
}

// config reads a VM's config, as configView makes it, and what is pending for its next
// power cycle, in one call; nil when the VM is gone.
func (s *session) config(ctx context.Context, node string, vmid int) (pve.Config, pve.Pending, error) {
	conf, pending, err := s.api.VMConfig(ctx, node, vmid)
	if pve.IsNotFound(err) {
		return nil, pve.Pending{}, nil
	}
	if err != nil {
		return nil, pve.Pending{}, err
	}
	return configView(conf, pending), pending, nil
}

// runningKeys are the config keys of a VM's CPUs and memory and of the headroom to
// grow them while it runs (see hotplug.go).
var runningKeys = []string{"cores", "sockets", "vcpus", "memory", "numa", "hotplug"}

// configView is a VM's config as the driver compares it to the machine's spec: with
// PVE's pending changes in, as PVE's GET config answers by default, so that a change
// PVE holds for the VM's next power cycle (a NIC on a VM without network hotplug) is
// not written again; but the CPUs, memory and hotplug settings the VM runs with, which
// status.hardware reports and which decide what may grow online.
func configView(conf pve.Config, pending pve.Pending) pve.Config {
	out := pending.Apply(conf)
	for _, k := range runningKeys {
		if v, ok := conf[k]; ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	return out
}
