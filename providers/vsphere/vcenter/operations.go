package vcenter

import (
	"context"
	"errors"
	"sort"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"
)

// ErrToolsUnavailable says a guest cannot be asked to shut down: VMware Tools do not run
// in it, or it is not in a state to take the request.
var ErrToolsUnavailable = errors.New("the guest cannot take a shutdown request")

// ReconfigureRequest is a change of an existing VM's hardware.
type ReconfigureRequest struct {
	// CPUs and MemoryMiB set the VM's virtual CPUs and memory; 0 leaves them.
	CPUs      int32
	MemoryMiB int64
	// Disks are the VM's disks in bus order, grown where Bytes is larger, then the disks
	// to add; nil leaves the disks.
	Disks []Disk
}

// Reconfigure starts one ReconfigVM task that makes the changes, and returns its ID.
// The task names the config.changeVersion vm was read with, so that vCenter refuses it
// (ConcurrentAccess) when the VM changed since: a step computed from a stale read, such
// as a disk added by a task whose end a restarted provider never saw, is not made twice.
func (c *Client) Reconfigure(ctx context.Context, vm *VM, req ReconfigureRequest) (string, error) {
	spec := types.VirtualMachineConfigSpec{ChangeVersion: vm.ChangeVersion, NumCPUs: req.CPUs, MemoryMB: req.MemoryMiB}
	if req.Disks != nil {
		devs, _, err := diskChanges(vm.devices, req.Disks, &keySource{next: -200}, false)
		if err != nil {
			return "", err
		}
		spec.DeviceChange = devs
	}
	res, err := methods.ReconfigVM_Task(ctx, c.vim, &types.ReconfigVM_Task{This: vm.Ref.ref(), Spec: spec})
	if err != nil {
		return "", c.fail("reconfigure VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// RemoveExtraConfig starts one ReconfigVM task that removes the keys from the VM's
// extraConfig (vSphere removes a key set to the empty string) and changes nothing
// else, and returns the task's ID.
func (c *Client) RemoveExtraConfig(ctx context.Context, vm *VM, keys ...string) (string, error) {
	spec := types.VirtualMachineConfigSpec{}
	for _, k := range keys {
		spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: k, Value: ""})
	}
	res, err := methods.ReconfigVM_Task(ctx, c.vim, &types.ReconfigVM_Task{This: vm.Ref.ref(), Spec: spec})
	if err != nil {
		return "", c.fail("remove extraConfig keys of VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// SetExtraConfig starts one ReconfigVM task that sets the keys in the VM's extraConfig
// and changes nothing else, and returns the task's ID. The reconfiguration names the
// config.changeVersion vm was read with, so vCenter refuses it (a ConcurrentAccess
// fault, of the call or of the task: see IsConcurrentAccess) when the VM's configuration
// changed since: of two writers that read the same VM, one wins.
func (c *Client) SetExtraConfig(ctx context.Context, vm *VM, values map[string]string) (string, error) {
	spec := types.VirtualMachineConfigSpec{ChangeVersion: vm.ChangeVersion}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: k, Value: values[k]})
	}
	res, err := methods.ReconfigVM_Task(ctx, c.vim, &types.ReconfigVM_Task{This: vm.Ref.ref(), Spec: spec})
	if err != nil {
		if fault.Is(err, &types.ConcurrentAccess{}) {
			return "", &Fault{Kind: FaultConcurrentAccess, Object: vm.Ref, Message: "VM " + vm.Name + " changed since it was read"}
		}
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return "", notFound("VM " + vm.Name)
		}
		return "", c.fail("set extraConfig keys of VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// PowerOn starts powering the VM on, or resuming it, and returns the task's ID.
func (c *Client) PowerOn(ctx context.Context, vm *VM) (string, error) {
	res, err := methods.PowerOnVM_Task(ctx, c.vim, &types.PowerOnVM_Task{This: vm.Ref.ref()})
	if err != nil {
		return "", c.fail("power on VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// PowerOff starts a hard power off of the VM and returns the task's ID.
func (c *Client) PowerOff(ctx context.Context, vm *VM) (string, error) {
	res, err := methods.PowerOffVM_Task(ctx, c.vim, &types.PowerOffVM_Task{This: vm.Ref.ref()})
	if err != nil {
		return "", c.fail("power off VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// Suspend starts suspending the VM and returns the task's ID.
func (c *Client) Suspend(ctx context.Context, vm *VM) (string, error) {
	res, err := methods.SuspendVM_Task(ctx, c.vim, &types.SuspendVM_Task{This: vm.Ref.ref()})
	if err != nil {
		return "", c.fail("suspend VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}

// ShutdownGuest asks the VM's guest to shut down through VMware Tools, which vSphere
// does not run as a task: the VM is off once the guest has stopped. It returns
// ErrToolsUnavailable when the guest cannot take the request.
func (c *Client) ShutdownGuest(ctx context.Context, vm *VM) error {
	_, err := methods.ShutdownGuest(ctx, c.vim, &types.ShutdownGuest{This: vm.Ref.ref()})
	switch {
	case err == nil:
		return nil
	case fault.Is(err, &types.ToolsUnavailable{}), fault.Is(err, &types.InvalidState{}):
		return ErrToolsUnavailable
	}
	return c.fail("shut down the guest of VM "+vm.Name, err)
}

// Destroy starts destroying the VM and its disks and returns the task's ID. It returns
// ErrNotFound when the VM is already gone.
func (c *Client) Destroy(ctx context.Context, vm *VM) (string, error) {
	res, err := methods.Destroy_Task(ctx, c.vim, &types.Destroy_Task{This: vm.Ref.ref()})
	if err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return "", notFound("VM " + vm.Name)
		}
		return "", c.fail("destroy VM "+vm.Name, err)
	}
	return res.Returnval.Value, nil
}
