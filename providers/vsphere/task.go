package vsphere

import (
	"context"
	"strings"
	"time"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// shutdownTaskPrefix starts the task reference recorded for a guest shutdown, which
// vSphere does not run as a task: "shutdownGuest:<vm ID>/<boot time>". Observe reports
// it in flight while the VM runs the boot it was asked of, until the shutdown timeout
// has passed; Update then powers the VM off. A VM powered on again since (a restart's
// power cycle) has shut down: its new boot is not held up until the timeout.
const shutdownTaskPrefix = "shutdownGuest:"

// shutdownTask is the task recorded for a shutdown of vm's guest in its current boot.
func shutdownTask(vm *vcenter.VM) providersdk.Task {
	return providersdk.Task{Ref: shutdownTaskPrefix + vm.Ref.Value + "/" + vm.BootTime.UTC().Format(time.RFC3339Nano), Operation: providersdk.OperationUpdate}
}

// shuttingDown reports whether m's task is a guest shutdown of the boot vm runs, still
// within the shutdown timeout.
func (s *session) shuttingDown(m *providersdk.Machine, vm *vcenter.VM) bool {
	// The prefix first: most Observes have no shutdown, and need no boot time formatted.
	return isShutdown(m.Task) && vm.Power == vcenter.PoweredOn && m.Task.Ref == shutdownTask(vm).Ref &&
		!m.Task.TimedOut(s.driver.now(), s.driver.shutdownTimeout)
}

// isShutdown reports whether t is a guest shutdown.
func isShutdown(t providersdk.Task) bool { return strings.HasPrefix(t.Ref, shutdownTaskPrefix) }

// pollTask reads the state of the machine's recorded task in one property read: running
// or not, and the VM a clone that ended made (made), which Observe then reads without
// searching vCenter for it. A failed task is a providersdk.TaskFailedError, except a
// clone that failed because a VM with the name exists (that VM is adopted when it
// carries the machine's UID), and a claim (Adopt) or a reconfiguration that lost a
// race: see taskFailed.
func (s *session) pollTask(ctx context.Context, m *providersdk.Machine) (running bool, made string, err error) {
	if !m.Task.InFlight() || isShutdown(m.Task) {
		return false, "", nil
	}
	info, err := s.vc.PollTask(ctx, m.Task.Ref)
	if err != nil {
		return false, "", err
	}
	switch info.State {
	case vcenter.TaskRunning:
		return true, "", nil
	case vcenter.TaskFailed:
		return false, "", s.taskFailed(ctx, m, info.Fault)
	}
	if m.Task.Operation == providersdk.OperationClone && info.Result.Type == "VirtualMachine" {
		made = info.Result.Value
	}
	return false, made, nil
}

// taskFailed decides what a failed task means for the machine.
func (s *session) taskFailed(ctx context.Context, m *providersdk.Machine, f *vcenter.Fault) error {
	clone := m.Task.Operation == providersdk.OperationClone
	switch {
	case f.Kind == vcenter.FaultDuplicateName && clone:
		return s.nameTaken(ctx, m, f.Object, nil)
	case f.Kind == vcenter.FaultInvalidPowerState && !clone:
		return nil // the VM was already in the state the task asked for
	case f.Kind == vcenter.FaultConcurrentAccess && (m.Task.Operation == providersdk.OperationAdopt || m.Task.Operation == providersdk.OperationUpdate):
		// The VM changed since the Observe the task was computed from: most often
		// another machine's claim won (Observe then says AlreadyManaged), or a step
		// already made. Observe reads it again, and the next step is computed afresh.
		return nil
	}
	return providersdk.TaskFailed(m.Task, f.Message)
}

// task is the SDK's record of the vCenter task ref.
func task(ref, operation string) providersdk.Task {
	return providersdk.Task{Ref: ref, Operation: operation}
}
