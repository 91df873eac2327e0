package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

var _ providersdk.Adopter = (*session)(nil)

// providerIDScheme starts every Proxmox VE provider ID: proxmox://<cluster>/<vmid>.
const providerIDScheme = "proxmox://"

// ProviderIDPrefix is what the provider ID of every VM of the session's cluster starts
// with, proxmox://<cluster>/, which the VM's VMID follows.
func (s *session) ProviderIDPrefix() string { return providerIDScheme + s.cluster + "/" }

// providerID is the provider ID of the cluster's VM vmid.
func (s *session) providerID(vmid int) string { return s.ProviderIDPrefix() + strconv.Itoa(vmid) }

// adoptedVMID reads the VMID of an adoptProviderID, which must be a provider ID as
// Observe reports them for this cluster: ProviderIDPrefix, then a positive VMID as PVE
// writes it (no sign, no leading zero), so that the machine's providerID ends up equal
// to it.
func (s *session) adoptedVMID(id string) (int, error) {
	rest, ok := strings.CutPrefix(id, s.ProviderIDPrefix())
	switch {
	case !strings.HasPrefix(id, providerIDScheme):
		return 0, providersdk.AdoptionTargetInvalid(id, "it is not a Proxmox VE provider ID, proxmox://<cluster>/<vmid>")
	case !ok:
		// The Provider's cluster is in its status.providerIDPrefix; the message does not
		// repeat it to whoever reads the machine.
		return 0, providersdk.AdoptionTargetInvalid(id, "it names another Proxmox VE cluster than this Provider's (see its status.providerIDPrefix)")
	}
	vmid, err := strconv.Atoi(rest)
	if err != nil || vmid <= 0 || strconv.Itoa(vmid) != rest {
		return 0, providersdk.AdoptionTargetInvalid(id, fmt.Sprintf("%q is not a VMID, a positive integer", rest))
	}
	return vmid, nil
}

// mark is whose identity marks a VM carries.
type mark int

const (
	// unmarked: no machine's.
	unmarked mark = iota
	// ownMark: the machine's, its UID in the description (as findIn confirms a VM).
	ownMark
	// otherMark: another machine's, its UID in the description or its tag.
	otherMark
	// tagOnly: the machine's tag alone, with no UID in the description, which banlieue
	// never writes (both marks go in one config update): an IdentityMismatch, as in findIn.
	tagOnly
)

// markOf says whose identity marks conf carries for the machine uid. A tag TagPrefix+x
// is a machine's mark whatever x is, as ListMarked reads tags.
func markOf(conf pve.Config, uid k8stypes.UID) mark {
	owner := descriptionUID(conf["description"])
	if owner == string(uid) {
		return ownMark
	}
	tagged := false
	for _, t := range conf.Tags() {
		switch other, ok := strings.CutPrefix(t, TagPrefix); {
		case !ok || other == "":
		case other == string(uid):
			tagged = true
		default:
			owner = other
		}
	}
	switch {
	case owner != "":
		return otherMark
	case tagged:
		return tagOnly
	}
	return unmarked
}

// inScope reports whether the Provider may act on the guest r: on one of its nodes
// (parameters.node, when set) and within its pool (parameters.pool, when set; a nested
// pool "a/b" is within "a"), as Admit bounds the VMs the Provider makes.
func (s *session) inScope(r pve.Resource) bool {
	return (len(s.nodes) == 0 || slices.Contains(s.nodes, r.Node)) && providersdk.WithinPath(r.Pool, s.pool)
}

// observeAdopting observes the VM an adopting machine's spec.adoptProviderID names,
// found by its VMID in the cluster's listing, which also tells its node, pool and
// template flag (one call; the VMID is the VM's for life, migrations included). state
// is the machine's recorded task's, reported again while it runs.
//
// A VM with the machine's marks is observed as any machine's; one without marks is
// Exists and Unclaimed, for Adopt, with what Adopt needs (its config and the config's
// digest) in State; one with another machine's marks is AlreadyManaged. None is not
// there, which the Reconciler reports as AdoptionTargetNotFound. An ID of another form
// and a template are AdoptionTargetInvalid, a VM outside the Provider's nodes or pool
// NotPermitted, checked before the marks so that whether such a VM is managed is not
// told. For a machine being deleted every VM but its own is not there: an adopting
// machine owns nothing else, and a VM it never claimed is not its to delete or release.
func (s *session) observeAdopting(ctx context.Context, m *providersdk.Machine, state taskState) (providersdk.Observation, error) {
	id := m.Spec.AdoptProviderID
	var inFlight providersdk.Task
	if state == taskRunning {
		inFlight = m.Task
	}
	vmid, err := s.adoptedVMID(id)
	if err != nil {
		if m.Deleting {
			return providersdk.Observation{Task: inFlight}, nil
		}
		return providersdk.Observation{}, err
	}
	// A VM migrated, or destroyed, between the listing and the reads of its config and
	// status is looked for once more.
	for range 2 {
		all, err := s.api.Resources(ctx)
		if err != nil {
			return providersdk.Observation{}, err
		}
		i := slices.IndexFunc(all, func(r pve.Resource) bool { return r.VMID == vmid })
		if i < 0 {
			return providersdk.Observation{Task: inFlight}, nil
		}
		r := all[i]
		if !s.inScope(r) {
			if m.Deleting {
				// The Provider may not touch it; the machine goes, the VM stays as it is.
				return providersdk.Observation{}, nil
			}
			return providersdk.Observation{}, providersdk.Retryable(infrav1.MachineNotPermittedReason,
				"the VM %s is outside the nodes and pool this Provider may use; it is left alone", id)
		}
		conf, pending, err := s.config(ctx, r.Node, r.VMID)
		switch {
		case err != nil:
			return providersdk.Observation{}, err
		case conf == nil:
			continue
		case r.Template || conf["template"] == "1":
			if m.Deleting {
				return providersdk.Observation{}, nil
			}
			return providersdk.Observation{}, providersdk.AdoptionTargetInvalid(id, "it is a template")
		}
		// The listing's name, lock and tags lag behind the config (see unreported).
		r.Name, r.Lock, r.Tags = conf["name"], conf["lock"], conf["tags"]
		vm := &vmState{Resource: r, conf: conf, pending: pending}
		switch mk := markOf(conf, m.UID); {
		case mk == ownMark:
			o, err := s.observe(ctx, m, vm)
			if pve.IsNotFound(err) {
				continue
			}
			if err != nil {
				return providersdk.Observation{}, err
			}
			o.Task = inFlight
			return o, nil
		case m.Deleting:
			return providersdk.Observation{}, nil
		case mk == otherMark:
			return providersdk.Observation{}, providersdk.AlreadyManaged(id)
		case mk == tagOnly:
			return providersdk.Observation{}, identityMismatch(vm.VMID, vm.Name, TagPrefix+string(m.UID))
		}
		power, running, _, err := s.powerState(ctx, vm)
		if pve.IsNotFound(err) {
			continue
		}
		if err != nil {
			return providersdk.Observation{}, err
		}
		return providersdk.Observation{
			Exists: true, Unclaimed: true, ProviderID: s.providerID(vmid), PowerState: power, Task: inFlight,
			State: &observed{vm: vm, power: power, running: running},
		}, nil
	}
	return providersdk.Observation{}, fmt.Errorf("failed to observe the VM %s: it vanished twice while it was read", id)
}

// Adopt writes the machine's identity marks on the VM Observe found unclaimed, the
// marks Create gives a clone: its tag, added to the VM's tags, and banlieue's
// description lines, after the owner's notes. It is one synchronous config update
// guarded by the digest of the config Observe read, and nothing else changes: no power
// change, no hardware change. PVE checks the digest under the VM's config lock, so of
// two machines adopting one VM at once one writes its marks and the other's update is
// refused: that one is told at once the VM is AlreadyManaged. A VM locked by a task (a
// backup, a migration) is adopted once the task is done.
func (s *session) Adopt(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.AdoptResult, error) {
	st, err := stateOf(obs, "adopt")
	switch {
	case err != nil:
		return providersdk.AdoptResult{}, err
	case st.vm == nil:
		return providersdk.AdoptResult{}, fmt.Errorf("failed to adopt the VM %s: Observe found none", m.Spec.AdoptProviderID)
	case !obs.Unclaimed:
		return providersdk.AdoptResult{}, nil
	}
	vm := st.vm
	id := s.providerID(vm.VMID)
	digest := vm.conf["digest"]
	switch {
	case vm.Lock != "":
		return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
	case digest == "":
		// Without the digest the update would not be a compare-and-set, and two
		// adoptions could both succeed.
		return providersdk.AdoptResult{}, fmt.Errorf("failed to adopt the VM %s: Proxmox VE reported no digest of its config", id)
	}
	tags := markTags(vm.conf.Tags(), m)
	if !slices.Contains(tags, AdoptedTag) {
		tags = append(tags, AdoptedTag)
	}
	// Lines a banlieue machine once wrote (a stale "Managed by" line) are written anew;
	// Release takes them off again and leaves the owner's notes as they were.
	desc := withoutOwnLines(vm.conf["description"])
	if desc != "" && !strings.HasSuffix(desc, "\n") {
		desc += "\n"
	}
	desc += description(m, "")
	ch := pve.ConfigChange{Set: map[string]any{"tags": pve.JoinTags(tags), "description": desc}, Digest: digest}
	err = s.api.SetConfig(ctx, vm.Node, vm.VMID, ch)
	msg := ""
	if err != nil {
		msg = pve.Message(err)
	}
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Marked the adopted VM as the machine's", "providerID", id)
		return providersdk.AdoptResult{}, nil
	case pve.IsNotFound(err):
		return providersdk.AdoptResult{}, nil // gone meanwhile: the next Observe says so
	case pve.IsConfigChanged(msg):
		// Someone changed the config since Observe read it: another machine's adoption,
		// or the VM's owner. Which one is read now, so that a lost race is told at once.
		if conf, _, err := s.config(ctx, vm.Node, vm.VMID); err == nil && conf != nil && markOf(conf, m.UID) == otherMark {
			return providersdk.AdoptResult{}, providersdk.AlreadyManaged(id)
		}
		return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
	case pve.IsLocked(msg) || pve.IsLockTimeout(msg):
		return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
	}
	return providersdk.AdoptResult{}, pve.Refused("adopt VM "+strconv.Itoa(vm.VMID), err)
}
