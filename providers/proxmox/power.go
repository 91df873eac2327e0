package proxmox

import (
	"context"
	"maps"
	"slices"
	"strconv"

	ctrl "sigs.k8s.io/controller-runtime"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// Update brings the VM Observe found in line with the spec, one step a call: the
// config (one synchronous update; CPU and memory increases that PVE hotplugs into the
// running VM at once, other changes to CPUs, memory or firmware only while the VM is
// stopped, and otherwise at its next power cycle), then each disk to grow (a resize
// task), then power (a task). The reconciler observes after each step and calls again
// until the VM is up to date.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
	st, err := stateOf(obs, "update")
	if err != nil || st.vm == nil {
		return providersdk.UpdateResult{}, err
	}
	vm := st.vm
	if vm.Lock != "" {
		return providersdk.UpdateResult{}, providersdk.InFlight(providersdk.OperationUpdate, "")
	}
	have, want := st.power, m.DesiredPower()
	if err := s.knowNodeCPUs(ctx, vm, have); err != nil {
		return providersdk.UpdateResult{}, err
	}
	// What needs the VM stopped waits for its next power cycle when the machine does
	// not ask for it off (Observe reports it pending); the rest of the config is
	// written now.
	ch, err := s.changes(m, vm, have)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	if len(ch.set) > 0 || len(ch.del) > 0 || len(ch.revert) > 0 {
		if len(ch.offline) > 0 && have != banlieuev1.PowerStatePoweredOff {
			// The machine asks for the VM off: it is stopped first.
			return s.setPower(ctx, vm, have, want)
		}
		change := pve.ConfigChange{Set: ch.set, Delete: ch.del, Revert: ch.revert, Digest: vm.conf["digest"]}
		if err := s.api.SetConfig(ctx, vm.Node, vm.VMID, change); err != nil {
			if problems := pve.HotplugProblems(err); problems != nil {
				// PVE made the rest of the change and keeps these for the VM's next
				// power cycle, which the next Observe reports pending.
				ctrl.LoggerFrom(ctx).Info("Proxmox VE could not hotplug a change into the running VM; it applies at the VM's next power cycle",
					"vmid", vm.VMID, "problems", problems)
				return providersdk.UpdateResult{}, nil
			}
			return providersdk.UpdateResult{}, pve.Refused("update the config of VM "+strconv.Itoa(vm.VMID), busy(err))
		}
		return providersdk.UpdateResult{}, nil
	}
	// One resize task a call: the first disk to grow, in key order; the next call
	// grows the next one.
	if disks := slices.Sorted(maps.Keys(ch.grow)); len(disks) > 0 {
		disk := disks[0]
		upid, err := s.api.Resize(ctx, vm.Node, vm.VMID, disk, ch.grow[disk])
		if err != nil {
			return providersdk.UpdateResult{}, pve.Refused("grow disk "+disk+" of VM "+strconv.Itoa(vm.VMID), busy(err))
		}
		return providersdk.UpdateResult{Task: task(upid, providersdk.OperationUpdate)}, nil
	}
	return s.setPower(ctx, vm, have, want)
}

// setPower starts the power transition from have to want. Powering off asks the guest
// to shut down and has PVE stop the VM when it has not within the shutdown timeout
// (shutdown with forceStop), in one task: PVE times the wait, not the driver.
// Suspending pauses the VM in memory.
func (s *session) setPower(ctx context.Context, vm *vmState, have, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	var (
		action string
		upid   string
		err    error
	)
	switch {
	case have == want:
		return providersdk.UpdateResult{}, nil
	case want == banlieuev1.PowerStatePoweredOff:
		action = "shutdown"
		upid, err = s.api.Shutdown(ctx, vm.Node, vm.VMID, s.driver.shutdownTimeout, true)
	case have == banlieuev1.PowerStateSuspended:
		action = "resume"
		upid, err = s.api.Resume(ctx, vm.Node, vm.VMID)
	case have == banlieuev1.PowerStatePoweredOff:
		action = "start" // and, for Suspended, suspend on the next call
		upid, err = s.api.Start(ctx, vm.Node, vm.VMID)
	default:
		action = "suspend"
		upid, err = s.api.Suspend(ctx, vm.Node, vm.VMID)
	}
	if err != nil {
		return providersdk.UpdateResult{}, pve.Refused(action+" VM "+strconv.Itoa(vm.VMID), busy(err))
	}
	return providersdk.UpdateResult{Task: task(upid, providersdk.OperationUpdate)}, nil
}
