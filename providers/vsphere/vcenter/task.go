package vcenter

import (
	"context"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// TaskState is what became of a vCenter task.
type TaskState int

const (
	// TaskDone is a task that succeeded, or that vCenter has forgotten (it forgets
	// finished tasks after a while).
	TaskDone TaskState = iota
	// TaskRunning is a task that is queued or running.
	TaskRunning
	// TaskFailed is a task that failed; TaskInfo.Fault says why.
	TaskFailed
)

// TaskInfo is one look at a task.
type TaskInfo struct {
	// State is what became of the task.
	State TaskState
	// Fault is why a TaskFailed task failed.
	Fault *Fault
	// Result is the object a TaskDone task returned when it returned one, such as the
	// VM a clone made; the zero Ref otherwise.
	Result Ref
}

// PollTask reads the state of the task with ID ref in one property read.
func (c *Client) PollTask(ctx context.Context, ref string) (TaskInfo, error) {
	var task mo.Task
	moref := types.ManagedObjectReference{Type: "Task", Value: ref}
	if err := property.DefaultCollector(c.vim).RetrieveOne(ctx, moref, []string{"info.state", "info.error", "info.result"}, &task); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return TaskInfo{State: TaskDone}, nil
		}
		return TaskInfo{}, c.fail("read task "+ref, err)
	}
	switch task.Info.State {
	case types.TaskInfoStateQueued, types.TaskInfoStateRunning:
		return TaskInfo{State: TaskRunning}, nil
	case types.TaskInfoStateError:
		return TaskInfo{State: TaskFailed, Fault: faultOf(task.Info.Error)}, nil
	}
	info := TaskInfo{State: TaskDone}
	if r, ok := task.Info.Result.(types.ManagedObjectReference); ok {
		info.Result = refOf(r)
	}
	return info, nil
}
