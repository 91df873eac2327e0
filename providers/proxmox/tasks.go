package proxmox

import (
	"context"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// taskState is what became of a task.
type taskState int

const (
	// taskDone: no task, or it ended well, or PVE has forgotten it.
	taskDone taskState = iota
	// taskRunning: the task runs.
	taskRunning
)

// pollTask reads the state of the machine's recorded task in one call. A task that
// ended with an exit status other than OK is a providersdk.TaskFailedError carrying
// PVE's exit status.
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
	case st.Failed():
		return taskDone, providersdk.TaskFailed(t, st.ExitStatus)
	}
	return taskDone, nil
}

// task is the SDK's record of a PVE task.
func task(upid, operation string) providersdk.Task {
	return providersdk.Task{Ref: upid, Operation: operation}
}
