package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// shutdownTaskPrefix starts the task reference recorded for a guest shutdown, which
// vSphere does not run as a task: "shutdownGuest:<vm ID>". Observe reports it in flight
// until the VM is off or the shutdown timeout has passed; Update then powers the VM off.
const shutdownTaskPrefix = "shutdownGuest:"

// taskState is what became of the machine's recorded task.
type taskState int

const (
	// taskDone: no task, or it succeeded, or vCenter has forgotten it.
	taskDone taskState = iota
	// taskRunning: the task is queued or running.
	taskRunning
)

// Observe finds the machine's VM by its instance UUID and reports its state, reading the
// VM in one property collector call. It polls the machine's recorded task first. It never
// changes vCenter.
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	state, err := s.pollTask(ctx, m)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if state == taskRunning && m.Task.Operation == providersdk.OperationClone {
		// The clone is making the VM, which may be half-made: it exists as far as the
		// reconciler is concerned, so a machine deleted now waits for it instead of
		// leaving it behind. Until the clone ends, a poll is this one task read.
		return providersdk.Observation{Exists: true, Task: m.Task}, nil
	}
	vm, err := s.findVM(ctx, string(m.UID))
	if err != nil {
		return providersdk.Observation{}, err
	}
	if vm == nil {
		return providersdk.Observation{}, nil
	}
	if err := s.checkIdentity(vm, m); err != nil {
		return providersdk.Observation{}, err
	}
	if strings.HasPrefix(m.Task.Ref, shutdownTaskPrefix) && state == taskDone &&
		vm.power == types.VirtualMachinePowerStatePoweredOn && !s.shutdownTimedOut(m.Task) {
		state = taskRunning
	}
	o := s.observe(ctx, m, vm)
	if state == taskRunning {
		o.Task = m.Task
	}
	return o, nil
}

// pollTask reads the state of the machine's recorded task in one property read. A failed
// task is a providersdk.TaskFailedError, except a clone that failed because a VM with the
// name exists: that VM is adopted when it carries the machine's UID.
func (s *session) pollTask(ctx context.Context, m *providersdk.Machine) (taskState, error) {
	if !m.Task.InFlight() || strings.HasPrefix(m.Task.Ref, shutdownTaskPrefix) {
		return taskDone, nil
	}
	var task mo.Task
	ref := types.ManagedObjectReference{Type: "Task", Value: m.Task.Ref}
	if err := property.DefaultCollector(s.vim).RetrieveOne(ctx, ref, []string{"info.state", "info.error"}, &task); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return taskDone, nil // vCenter forgets finished tasks after a while
		}
		return taskDone, s.fail("read task "+m.Task.Ref, err)
	}
	switch task.Info.State {
	case types.TaskInfoStateQueued, types.TaskInfoStateRunning:
		return taskRunning, nil
	case types.TaskInfoStateError:
		return taskDone, s.taskFailed(ctx, m, task.Info.Error)
	}
	return taskDone, nil
}

// taskFailed decides what a failed task means for the machine.
func (s *session) taskFailed(ctx context.Context, m *providersdk.Machine, f *types.LocalizedMethodFault) error {
	if f != nil {
		var dup *types.DuplicateName
		if _, ok := fault.As(f, &dup); ok && m.Task.Operation == providersdk.OperationClone {
			return s.nameTaken(ctx, m, dup, nil)
		}
		if fault.Is(f, &types.InvalidPowerState{}) && m.Task.Operation != providersdk.OperationClone {
			return nil // the VM was already in the state the task asked for
		}
	}
	return providersdk.TaskFailed(m.Task, faultMessage(f))
}

// checkIdentity refuses a VM that has the machine's instance UUID but another UID in
// extraConfig: someone else set that UUID, and the VM is not the machine's to manage. A
// VM without the key yet is one a clone is still making (a provider that crashed lost
// the clone's task), so it is waited for rather than refused.
func (s *session) checkIdentity(vm *vmState, m *providersdk.Machine) error {
	switch vm.machineUID {
	case string(m.UID):
		return nil
	case "":
		return providersdk.InFlight(providersdk.OperationClone, "")
	}
	return providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
		"VM %q (%s) has this machine's instance UUID but its extraConfig %s is %q, not the machine's UID; it is left alone",
		vm.name, vm.ref.Value, ExtraConfigMachineUID, vm.machineUID)
}

// observe builds the observation of an existing VM.
func (s *session) observe(ctx context.Context, m *providersdk.Machine, vm *vmState) providersdk.Observation {
	o := providersdk.Observation{
		Exists:     true,
		PowerState: powerState(vm.power),
		Addresses:  addresses(vm),
		Details:    &infrav1.VSphereStatus{MoRef: vm.ref.Value, InstanceUUID: vm.instanceUUID},
	}
	o.ProviderID = providerID(vm)
	o.WaitingForGuest = o.PowerState == banlieuev1.PowerStatePoweredOn && len(o.Addresses) == 0
	o.FailureDomain = s.domainOfHost(ctx, vm.host)
	o.UpToDate = o.PowerState == desiredPower(m) && len(hardwareChanges(m, vm)) == 0
	return o
}

// domainOfHost returns the failure domain of a host, discovering the inventory again
// when the host is new to it; "" when the host is in no cluster.
func (s *session) domainOfHost(ctx context.Context, host types.ManagedObjectReference) string {
	if host.Value == "" {
		return ""
	}
	for _, refresh := range []bool{false, true} {
		inv, err := s.domains(ctx, refresh)
		if err != nil {
			return ""
		}
		if fd := inv.byHost[host]; fd != nil {
			return fd.name
		}
	}
	return ""
}

// providerID is the VM's spec.providerID, "vsphere://<config.uuid>"; "" while the VM
// has no UUID.
func providerID(vm *vmState) string {
	if vm.uuid == "" {
		return ""
	}
	return "vsphere://" + vm.uuid
}

// desiredPower is the machine's power state, PoweredOn when unset.
func desiredPower(m *providersdk.Machine) banlieuev1.PowerState {
	if m.Spec.PowerState == "" {
		return banlieuev1.PowerStatePoweredOn
	}
	return m.Spec.PowerState
}

// powerState maps vSphere's power state.
func powerState(p types.VirtualMachinePowerState) banlieuev1.PowerState {
	switch p {
	case types.VirtualMachinePowerStatePoweredOn:
		return banlieuev1.PowerStatePoweredOn
	case types.VirtualMachinePowerStateSuspended:
		return banlieuev1.PowerStateSuspended
	}
	return banlieuev1.PowerStatePoweredOff
}

// addresses are the guest's IP addresses, the primary one first, without duplicates or
// link-local addresses (which are of no use outside the link).
func addresses(vm *vmState) []banlieuev1.MachineAddress {
	var out []banlieuev1.MachineAddress
	seen := map[string]bool{}
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsLoopback() {
			return
		}
		a := ip.String()
		if !seen[a] {
			seen[a] = true
			out = append(out, banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: a})
		}
	}
	add(vm.guestIP)
	for _, n := range vm.guestNet {
		for _, ip := range n.IpAddress {
			add(ip)
		}
	}
	return out
}

// shutdownTimedOut reports whether a guest shutdown recorded as task t has had its time.
// A shutdown just recorded (no start time yet) has not.
func (s *session) shutdownTimedOut(t providersdk.Task) bool {
	return !t.StartedAt.IsZero() && s.driver.now().Sub(t.StartedAt) >= s.driver.shutdownTimeout
}

// Delete powers the machine's VM off, then destroys it, each as a task. It succeeds when
// the VM is already gone.
func (s *session) Delete(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
	state, err := s.pollTask(ctx, m)
	var failed *providersdk.TaskFailedError
	if err != nil && !errors.As(err, &failed) && !providersdk.IsPermanent(err) {
		// A failed earlier task does not stop the deletion; not reaching vCenter does.
		return providersdk.DeleteResult{}, err
	}
	vm, err := s.findVM(ctx, string(m.UID))
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	if vm == nil {
		if state == taskRunning && m.Task.Operation == providersdk.OperationClone {
			return providersdk.DeleteResult{}, providersdk.InFlight(m.Task.Operation, m.Task.Ref)
		}
		return providersdk.DeleteResult{}, nil
	}
	if err := s.checkIdentity(vm, m); err != nil {
		return providersdk.DeleteResult{}, err
	}
	if vm.template {
		return providersdk.DeleteResult{}, providersdk.Permanent(infrav1.MachineFailedReason,
			"VM %q (%s) has become a template; banlieue does not delete templates", vm.name, vm.ref.Value)
	}
	if state == taskRunning {
		return providersdk.DeleteResult{}, providersdk.InFlight(m.Task.Operation, m.Task.Ref)
	}
	if vm.power != types.VirtualMachinePowerStatePoweredOff {
		res, err := methods.PowerOffVM_Task(ctx, s.vim, &types.PowerOffVM_Task{This: vm.ref})
		if err != nil {
			return providersdk.DeleteResult{}, s.fail("power off VM "+vm.name, err)
		}
		return providersdk.DeleteResult{Task: task(res.Returnval, providersdk.OperationDelete)}, nil
	}
	res, err := methods.Destroy_Task(ctx, s.vim, &types.Destroy_Task{This: vm.ref})
	if err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return providersdk.DeleteResult{}, nil
		}
		return providersdk.DeleteResult{}, s.fail("destroy VM "+vm.name, err)
	}
	return providersdk.DeleteResult{Task: task(res.Returnval, providersdk.OperationDelete)}, nil
}

// task is the SDK's record of a vCenter task.
func task(ref types.ManagedObjectReference, operation string) providersdk.Task {
	return providersdk.Task{Ref: ref.Value, Operation: operation}
}

// describeChanges joins change descriptions for a message.
func describeChanges(changes []string) string {
	switch len(changes) {
	case 0:
		return ""
	case 1:
		return changes[0]
	}
	return strings.Join(changes[:len(changes)-1], ", ") + " and " + changes[len(changes)-1]
}

// gibString formats a byte count in GiB.
func gibString(b int64) string { return fmt.Sprintf("%d GiB", b/gib) }
