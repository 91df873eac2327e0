package pve

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// upidFields are the fields of a UPID, UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:,
// the first being "UPID"; ok is false when upid is no UPID.
func upidFields(upid string) (fields []string, ok bool) {
	fields = strings.Split(upid, ":")
	return fields, len(fields) >= 8 && fields[0] == "UPID"
}

// UPIDNode is the node a UPID's task runs on, where its status is read; "" when upid
// is no UPID.
func UPIDNode(upid string) string {
	if f, ok := upidFields(upid); ok {
		return f[1]
	}
	return ""
}

// DestroyedVM is the node and VMID of the VM a qmdestroy task's UPID destroys; ok is
// false for any other task.
func DestroyedVM(upid string) (node string, vmid int, ok bool) {
	f, ok := upidFields(upid)
	if !ok || f[5] != "qmdestroy" {
		return "", 0, false
	}
	vmid, err := strconv.Atoi(f[6])
	return f[1], vmid, err == nil && vmid > 0
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

// RunningTasks lists the tasks of type typ that run on node: the node's own list of
// its running tasks, whole, where /cluster/tasks is cut to 32 KiB. PVE answers at most
// limit tasks (50 unless asked) from start, so it reads page after page.
func (c *Client) RunningTasks(ctx context.Context, node, typ string) ([]Task, error) {
	const page = 500
	var tasks []Task
	for {
		var more []Task
		q := map[string]string{"source": "active", "typefilter": typ, "start": strconv.Itoa(len(tasks)), "limit": strconv.Itoa(page)}
		if err := c.get(ctx, "/nodes/"+node+"/tasks", q, &more); err != nil {
			return nil, err
		}
		tasks = append(tasks, more...)
		if len(more) < page {
			return tasks, nil
		}
	}
}
