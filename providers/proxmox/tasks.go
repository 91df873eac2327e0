package proxmox

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// taskState is what became of a task.
type taskState int

const (
	// taskDone: no task, or PVE has forgotten it, or a clone lost its VMID.
	taskDone taskState = iota
	// taskRunning: the task runs.
	taskRunning
	// taskEnded: PVE says the task ended well.
	taskEnded
)

// pollTask reads the state of the machine's recorded task in one call. A task that
// ended with an exit status other than OK is a providersdk.TaskFailedError carrying
// PVE's exit status, but for a clone that lost its VMID to another client's request
// (see pve.LostVMIDRace): it left no VM, so it is done, and the machine, whose VM is
// then not found, is cloned again on a new VMID at once rather than after a backoff.
func (s *session) pollTask(ctx context.Context, t providersdk.Task) (taskState, error) {
	if !t.InFlight() {
		return taskDone, nil
	}
	st, err := s.api.TaskStatus(ctx, t.Ref)
	switch {
	case pve.IsNotFound(err):
		return taskDone, nil // PVE rotates its task index: a forgotten task is long over
	case err != nil:
		return taskDone, err
	case st.Running:
		return taskRunning, nil
	case st.Failed() && t.Operation == providersdk.OperationClone && pve.LostVMIDRace(st.ExitStatus):
		ctrl.LoggerFrom(ctx).Info("Clone lost its VMID to another request; cloning again", "task", t.Ref, "exitStatus", st.ExitStatus)
		return taskDone, nil
	case st.Failed() && pve.IsNoQuorum(st.ExitStatus):
		return taskDone, providersdk.TaskFailed(t, st.ExitStatus+" (the cluster has no quorum: bring enough of its nodes back online)")
	case st.Failed():
		return taskDone, providersdk.TaskFailed(t, st.ExitStatus)
	}
	return taskEnded, nil
}

// busy turns PVE's refusal of a change because the VM is busy with another task (its
// config locked by a clone, backup or migration, or its lock file held longer than
// PVE waits) or was changed by someone since it was read (the digest) into a wait:
// the Reconciler looks again soon, and the change is made once the other task is
// done. Other errors are returned as they are.
func busy(err error) error {
	if err == nil || providersdk.IsClassified(err) {
		return err
	}
	if msg := pve.Message(err); pve.IsLockTimeout(msg) || pve.IsLocked(msg) || pve.IsConfigChanged(msg) {
		return providersdk.InFlight(providersdk.OperationUpdate, "")
	}
	return err
}

// task is the SDK's record of a PVE task.
func task(upid, operation string) providersdk.Task {
	return providersdk.Task{Ref: upid, Operation: operation}
}
