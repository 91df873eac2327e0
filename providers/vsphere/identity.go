package vsphere

import (
	"context"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// ExtraConfigMachineUID is the extraConfig key that holds the machine's UID on its VM,
// next to the instance UUID, so a lookup can check that a VM is really the machine's.
const ExtraConfigMachineUID = "banlieue.machine.uid"

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
// is none.
func (s *session) findVM(ctx context.Context, m *providersdk.Machine) (*vcenter.VM, error) {
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
	if vm, err := s.findVM(ctx, m); err != nil || vm != nil {
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
