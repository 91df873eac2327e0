package pve

import (
	"context"
	"fmt"
	"strings"
)

// UPIDNode is the node a UPID's task runs on, where its status is read; "" when upid
// is no UPID: UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:.
func UPIDNode(upid string) string {
	parts := strings.Split(upid, ":")
	if len(parts) < 8 || parts[0] != "UPID" {
		return ""
	}
	return parts[1]
}

// TaskStatus is the state of one task.
type TaskStatus struct {
	// Running is true while the task runs.
	Running bool
	// ExitStatus is how the task ended: OK, "WARNINGS: n", or PVE's error message; ""
	// while it runs.
	ExitStatus string
}

// Failed reports whether the task ended with an error.
func (s TaskStatus) Failed() bool {
	return !s.Running && s.ExitStatus != "" && s.ExitStatus != "OK" && !strings.HasPrefix(s.ExitStatus, "WARNINGS")
}

// TaskStatus reads the state of the task upid on its node. It is IsNotFound when PVE
// does not know the task (its task index rotates) or upid is no UPID.
func (c *Client) TaskStatus(ctx context.Context, upid string) (TaskStatus, error) {
	node := UPIDNode(upid)
	if node == "" {
		return TaskStatus{}, fmt.Errorf("failed to read task %q: it is no UPID: %w", upid, ErrNotFound)
	}
	var st struct {
		Status     string `json:"status"`
		ExitStatus string `json:"exitstatus"`
	}
	if err := c.get(ctx, "/nodes/"+node+"/tasks/"+upid+"/status", nil, &st); err != nil {
		return TaskStatus{}, err
	}
	if st.Status == "running" {
		return TaskStatus{Running: true}, nil
	}
	return TaskStatus{ExitStatus: st.ExitStatus}, nil
}

// Task is a task as PVE's task lists show it.
type Task struct {
	// UPID is the task's UPID.
	UPID string `json:"upid"`
	// Type is PVE's task type, e.g. qmclone or download.
	Type string `json:"type"`
	// ID is what the task acts on: a clone's source VMID, a download's file name.
	ID string `json:"id"`
	// StartTime and EndTime are Unix times on PVE's clock; EndTime is 0 while the
	// task runs.
	StartTime int64 `json:"starttime"`
	EndTime   int64 `json:"endtime"`
	// Status is RUNNING, or the exit status of an ended task.
	Status string `json:"status"`
}

// Running reports whether the task runs.
func (t Task) Running() bool { return t.EndTime == 0 && (t.Status == "" || t.Status == "RUNNING") }

// ClusterTasks lists the recent tasks of every node, running and ended, in one call,
// which callers that ask at once share (coalesced).
func (c *Client) ClusterTasks(ctx context.Context) ([]Task, error) {
	return c.tasks.do(ctx, c.listTasks)
}

func (c *Client) listTasks(ctx context.Context) ([]Task, error) {
	var tasks []Task
	if err := c.get(ctx, "/cluster/tasks", nil, &tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}

// RunningTasks lists the tasks of type typ that run on node.
func (c *Client) RunningTasks(ctx context.Context, node, typ string) ([]Task, error) {
	var tasks []Task
	q := map[string]string{"source": "active", "typefilter": typ}
	if err := c.get(ctx, "/nodes/"+node+"/tasks", q, &tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}
