package proxmox

import (
	"context"
	"strings"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// taskState is what became of a task.
type taskState int

const (
	// taskDone: no task, or it ended well, or PVE has forgotten it.
	taskDone taskState = iota
	// taskRunning: the task runs.
	taskRunning
)

// upidNode is the node a UPID's task runs on, where its status is read:
// UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:.
func upidNode(upid string) string {
	parts := strings.Split(upid, ":")
	if len(parts) < 8 || parts[0] != "UPID" {
		return ""
	}
	return parts[1]
}

// pollTask reads the state of the machine's recorded task in one call. A task that
// ended with an exit status other than OK is a providersdk.TaskFailedError carrying
// PVE's exit status.
func (s *session) pollTask(ctx context.Context, t providersdk.Task) (taskState, error) {
	if !t.InFlight() {
		return taskDone, nil
	}
	node := upidNode(t.Ref)
	if node == "" {
		return taskDone, nil // not a UPID: nothing PVE can tell about it
	}
	var st struct {
		Status     string `json:"status"`
		ExitStatus string `json:"exitstatus"`
	}
	if err := s.get(ctx, "/nodes/"+node+"/tasks/"+t.Ref+"/status", nil, &st); err != nil {
		if notFound(err) {
			s.cloneEnded(t.Ref)
			return taskDone, nil // PVE rotates its task index: a forgotten task is long over
		}
		return taskDone, err
	}
	if st.Status == "running" {
		return taskRunning, nil
	}
	s.cloneEnded(t.Ref)
	if st.ExitStatus != "" && st.ExitStatus != "OK" && !strings.HasPrefix(st.ExitStatus, "WARNINGS") {
		return taskDone, providersdk.TaskFailed(t, st.ExitStatus)
	}
	return taskDone, nil
}

// task is the SDK's record of a PVE task.
func task(upid, operation string) providersdk.Task {
	return providersdk.Task{Ref: upid, Operation: operation}
}
