package vsphere

import (
	"context"
	"regexp"
	"strings"
	"sync"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// ExtraConfigMachineUID is the extraConfig key that holds the machine's UID on its VM,
// next to the instance UUID, so a lookup can check that a VM is really the machine's.
const ExtraConfigMachineUID = "banlieue.machine.uid"

// The identity mark's other extraConfig keys: the machine's namespace and name, which
// the orphan report names, and the cluster (providersdk.Machine.ClusterID), without
// which a Provider's orphanPolicy Delete never deletes the VM.
const (
	ExtraConfigMachineNamespace = "banlieue.machine.namespace"
	ExtraConfigMachineName      = "banlieue.machine.name"
	ExtraConfigClusterUID       = "banlieue.cluster.uid"
)

// markKeys are the mark's keys beside ExtraConfigMachineUID.
var markKeys = []string{ExtraConfigMachineNamespace, ExtraConfigMachineName, ExtraConfigClusterUID}

// mark is the machine's identity mark, as extraConfig values; a VM that carries
// another cluster's, or none, leaves ExtraConfigClusterUID out.
func mark(m *providersdk.Machine) map[string]string {
	values := map[string]string{ExtraConfigMachineUID: string(m.UID), ExtraConfigMachineNamespace: m.Namespace, ExtraConfigMachineName: m.Name}
	if m.ClusterID != "" {
		values[ExtraConfigClusterUID] = m.ClusterID
	}
	return values
}

// providerIDPrefix starts every provider ID of the driver: "vsphere://<BIOS UUID>". A
// BIOS UUID names no vCenter, so the prefix is the same for every Provider.
const providerIDPrefix = "vsphere://"

// biosUUIDs are the BIOS UUIDs vSphere writes: 32 hex digits in 8-4-4-4-12 groups.
var biosUUIDs = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// vmNames are the names vSphere takes for a VM: any characters (a '.' among them), at
// most 80.
var vmNames = providersdk.NameRules{MaxLen: 80}

// vmName is the machine's VM name, "<namespace>.<name>" (providersdk.BackendName): no
// two machines of any namespaces share it. The name is what a person sees in vCenter;
// lookups go by the instance UUID, so a VM named by an older scheme is still found.
func vmName(namespace, name string) string {
	return providersdk.BackendName(namespace, name, vmNames)
}

// findVM finds the machine's VM by its instance UUID, the machine's UID; nil when there
// is none. Where the machine's status records the VM's reference, it reads that VM
// alone and takes it when its instance UUID is the machine's: one call instead of a
// search and a read. With none recorded, made (the VM the machine's clone task
// returned, "" when none did) is read the same way. Otherwise (no reference, or one
// gone or now another VM's) it searches vCenter's index. A reference is only a hint:
// the instance UUID decides, as the search would.
func (s *session) findVM(ctx context.Context, m *providersdk.Machine, made string) (*vcenter.VM, error) {
	var st infrav1.VSphereStatus
	if m.Object != nil && m.StatusField(StatusBlock, &st) == nil && st.MoRef != "" {
		made = st.MoRef
	}
	if made != "" {
		vm, err := s.vc.ReadVM(ctx, vcenter.Ref{Type: "VirtualMachine", Value: made})
		switch {
		case err == nil && vm.InstanceUUID == string(m.UID):
			return vm, nil
		case providersdk.IsUnreachable(err) || providersdk.IsUnauthorized(err):
			return nil, err // the search would fail alike
		}
		// Gone, another VM's, or a reference vCenter refuses: the search decides.
	}
	vm, err := s.vc.FindVM(ctx, string(m.UID))
	if vcenter.IsNotFound(err) {
		return nil, nil
	}
	return vm, err
}

// checkIdentity refuses a VM that has the machine's instance UUID but another UID in
// extraConfig: someone else set that UUID, and the VM is not the machine's to manage. A
// VM without the key yet is one a clone is still making (a provider that crashed lost
// the clone's task), so it is waited for rather than refused.
func checkIdentity(vm *vcenter.VM, m *providersdk.Machine) error {
	switch vm.Identity {
	case string(m.UID):
		return nil
	case "":
		return providersdk.InFlight(providersdk.OperationClone, "")
	}
	return providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
		"VM %q (%s) has this machine's instance UUID but its extraConfig %s is %q, not the machine's UID; it is left alone",
		vm.Name, vm.Ref.Value, ExtraConfigMachineUID, vm.Identity)
}

// nameTaken decides what a VM that already has the machine's VM name in folder is: the
// machine's own (adopted: nil, the next look finds it by UUID), one a clone is still
// making, which after a restart may be the machine's own whose task was lost (waited
// for), or another's (NameConflict, left alone).
// The fault names the VM (obj); where it does not, folder (when known) is searched for
// the name.
func (s *session) nameTaken(ctx context.Context, m *providersdk.Machine, obj vcenter.Ref, folder *vcenter.Ref) error {
	if vm, err := s.findVM(ctx, m, ""); err != nil || vm != nil {
		return err
	}
	name := vmName(m.Namespace, m.Name)
	if obj.IsZero() && folder != nil {
		found, err := s.vc.FindChild(ctx, *folder, name, "VM")
		if vcenter.IsNotFound(err) {
			return providersdk.InFlight(providersdk.OperationClone, "") // gone meanwhile: look again
		}
		if err != nil {
			return err
		}
		obj = found
	}
	if obj.IsZero() {
		return nameConflict(m)
	}
	uuid, err := s.vc.InstanceUUID(ctx, obj)
	if vcenter.IsNotFound(err) {
		return providersdk.InFlight(providersdk.OperationClone, "")
	}
	if err != nil {
		return err
	}
	if uuid == "" || uuid == string(m.UID) {
		return providersdk.InFlight(providersdk.OperationClone, "")
	}
	return nameConflict(m)
}

// nameConflict says that a VM that is not the machine's has its VM name.
func nameConflict(m *providersdk.Machine) error {
	return providersdk.Permanent(infrav1.MachineNameConflictReason,
		"a VM named %q already exists in the target folder and is not this machine's (it lacks instance UUID %s); rename or remove it",
		vmName(m.Namespace, m.Name), m.UID)
}

// adoptedVM finds the VM an adopting machine's spec.adoptProviderID names by its BIOS
// UUID and reads it; nil when there is none. vSphere does not keep BIOS UUIDs unique:
// of several VMs with it, the one that carries the machine's UID is the machine's (a
// copy made after the adoption does not take its VM away), and otherwise the ID names
// no one VM (AdoptionTargetInvalid). An ID of another form is AdoptionTargetInvalid.
func (s *session) adoptedVM(ctx context.Context, m *providersdk.Machine) (*vcenter.VM, error) {
	id := m.Spec.AdoptProviderID
	uuid, ok := strings.CutPrefix(id, providerIDPrefix)
	if !ok || !biosUUIDs.MatchString(uuid) {
		return nil, providersdk.AdoptionTargetInvalid(id, "it is not of the form "+providerIDPrefix+"<BIOS UUID>")
	}
	// vCenter writes BIOS UUIDs in lower case, and providerID reports them so.
	refs, err := s.vc.FindVMsByBIOSUUID(ctx, strings.ToLower(uuid))
	if err != nil {
		return nil, err
	}
	var found []*vcenter.VM
	for _, ref := range refs {
		vm, err := s.vc.ReadVM(ctx, ref)
		if vcenter.IsNotFound(err) {
			continue // deleted since the search
		}
		if err != nil {
			return nil, err
		}
		if vm.Identity == string(m.UID) {
			return vm, nil
		}
		found = append(found, vm)
	}
	switch {
	case len(found) == 0:
		return nil, nil
	case len(found) > 1 && m.Deleting:
		return nil, nil // none of them is the machine's: nothing to let go or delete
	case len(found) > 1:
		return nil, providersdk.AdoptionTargetInvalid(id, "several VMs share this BIOS UUID")
	}
	return found[0], nil
}

// checkScope refuses a VM outside what the Provider offers (parameters.inScope).
// Without it, a tenant could adopt, and then change or delete, any VM the Provider's
// vCenter user sees. A Provider that pins neither datacenter nor folder offers the whole
// inventory, and costs no call. The error names only the provider ID, not where the VM
// is.
func (s *session) checkScope(ctx context.Context, id string, vm *vcenter.VM) error {
	if s.params.datacenter == "" && s.params.folder == "" {
		return nil
	}
	loc, err := s.vc.Locate(ctx, vm.Ref)
	if err != nil {
		return err
	}
	if s.params.inScope(loc) {
		return nil
	}
	return providersdk.Retryable(infrav1.MachineNotPermittedReason,
		"the VM %s is outside the datacenter and folder the Provider offers (parameters.datacenter, parameters.folder); it is left alone", id)
}

// claims serialises, per VM, the claims (Adopt) that one session makes: a claim reads
// the VM's mark again and writes its own only when there is none, under the VM's lock.
// vCenter also refuses a claim whose changeVersion is stale, which settles claims of
// different processes; the lock settles those of one process where the backend does not
// check (vcsim), and the claim task it remembers keeps a second claim waiting until the
// first one's mark is readable.
type claims struct {
	mu   sync.Mutex
	byVM map[vcenter.Ref]*claim
}

// claim is one VM's claim lock.
type claim struct {
	sync.Mutex
	// users counts the holders and waiters of the lock; guarded by claims.mu.
	users int
	// task is the claim task last started on the VM, "" once it is known to have ended;
	// guarded by the claim's lock.
	task string
}

// lock takes the claim lock of vm, and returns it with the function that releases it.
// A VM's entry goes once no one holds or waits for its lock and no claim task of it is
// remembered; forget drops it once a mark is seen.
func (c *claims) lock(vm vcenter.Ref) (*claim, func()) {
	c.mu.Lock()
	if c.byVM == nil {
		c.byVM = map[vcenter.Ref]*claim{}
	}
	cl := c.byVM[vm]
	if cl == nil {
		cl = &claim{}
		c.byVM[vm] = cl
	}
	cl.users++
	c.mu.Unlock()
	cl.Lock()
	return cl, func() {
		keep := cl.task != ""
		cl.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		if cl.users--; cl.users == 0 && !keep {
			delete(c.byVM, vm)
		}
	}
}

// forget drops what the session remembers of vm's claims once vm carries a mark: any
// later claim reads that mark and stops, so the claim task need not be waited for.
func (c *claims) forget(vm vcenter.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.byVM[vm]; cl != nil && cl.users == 0 {
		delete(c.byVM, vm)
	}
}
