package vsphere

import (
	"context"
	"errors"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// backendName names vSphere in the kit's messages.
const backendName = "vSphere"

// Update brings the observed VM in line with the spec: hardware first (while the VM is
// off, or what vSphere can change while it runs), then power. It returns the task it
// started.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
	vm, err := observedVM(obs)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	want := m.DesiredPower()
	changes := providersdk.HardwareDiff(m.Spec, hardware(vm))
	if err := providersdk.RefuseShrink(backendName, changes); err != nil {
		return providersdk.UpdateResult{}, err
	}
	if len(changes) > 0 {
		switch vm.Power {
		case vcenter.PoweredOff:
			return s.reconfigure(ctx, m, vm, changes)
		case vcenter.PoweredOn:
			// What vSphere cannot change as the VM runs waits for its next power cycle
			// (Observe reports it pending), or for the power-off the machine asks for.
			var online []providersdk.HardwareChange
			for _, c := range changes {
				if onlineChange(vm, c) {
					online = append(online, c)
				}
			}
			if len(online) > 0 {
				return s.reconfigure(ctx, m, vm, online)
			}
		}
	}
	return s.setPower(ctx, m, vm, want)
}

// onlineChange reports whether vSphere makes c now: only while the VM runs (a suspended
// VM changes nothing), CPUs and memory are hot-added when the VM allows it and the
// change is an increase; disks grow and are added online.
func onlineChange(vm *vcenter.VM, c providersdk.HardwareChange) bool {
	if vm.Power != vcenter.PoweredOn {
		return false
	}
	switch c.Kind {
	case providersdk.ChangeCPUs:
		return c.Increase() && vm.CPUHotAdd
	case providersdk.ChangeMemory:
		return c.Increase() && vm.MemoryHotAdd
	case providersdk.ChangeDiskGrow, providersdk.ChangeDiskAdd:
		return true
	}
	return false
}

// reconfigure applies hardware changes in one ReconfigVM task.
func (s *session) reconfigure(ctx context.Context, m *providersdk.Machine, vm *vcenter.VM, changes []providersdk.HardwareChange) (providersdk.UpdateResult, error) {
	req := vcenter.ReconfigureRequest{}
	withDisks := false
	for _, c := range changes {
		switch c.Kind {
		case providersdk.ChangeCPUs:
			req.CPUs = m.Spec.Hardware.CPUs
		case providersdk.ChangeMemory:
			req.MemoryMiB = m.Spec.Hardware.MemoryMiB
		case providersdk.ChangeDiskGrow, providersdk.ChangeDiskAdd:
			withDisks = true
		}
	}
	if withDisks {
		var err error
		if req.Disks, err = s.placementOf(ctx, vm).disks(m); err != nil {
			return providersdk.UpdateResult{}, err
		}
	}
	ref, err := s.vc.Reconfigure(ctx, vm, req)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	return providersdk.UpdateResult{Task: task(ref, providersdk.OperationUpdate)}, nil
}

// setPower starts the power transition to want. Powering off shuts the guest down when
// VMware Tools run, and powers the VM off when they do not, when the guest refuses, or
// when it has not stopped within the shutdown timeout.
func (s *session) setPower(ctx context.Context, m *providersdk.Machine, vm *vcenter.VM, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	have := powerState(vm.Power)
	var (
		ref string
		err error
	)
	switch {
	case have == want:
		return providersdk.UpdateResult{}, nil
	case want == banlieuev1.PowerStatePoweredOn,
		want == banlieuev1.PowerStateSuspended && have == banlieuev1.PowerStatePoweredOff:
		ref, err = s.vc.PowerOn(ctx, vm)
	case want == banlieuev1.PowerStateSuspended:
		ref, err = s.vc.Suspend(ctx, vm)
	default: // want == PoweredOff.
		shutdown := shutdownTask(vm)
		timedOut := m.Task.Ref == shutdown.Ref && m.Task.TimedOut(s.driver.now(), s.driver.shutdownTimeout)
		if have == banlieuev1.PowerStatePoweredOn && vm.ToolsRunning && !timedOut {
			switch err := s.vc.ShutdownGuest(ctx, vm); {
			case err == nil:
				return providersdk.UpdateResult{Task: shutdown}, nil
			case !errors.Is(err, vcenter.ErrToolsUnavailable):
				return providersdk.UpdateResult{}, err
			}
		}
		ref, err = s.vc.PowerOff(ctx, vm)
	}
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	return providersdk.UpdateResult{Task: task(ref, providersdk.OperationUpdate)}, nil
}
