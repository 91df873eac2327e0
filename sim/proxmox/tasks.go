package proxmoxsim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task is a snapshot of one task, for tests that check what a client started.
type Task struct {
	// UPID is the task's identifier.
	UPID string
	// Node, Type, ID and User are the UPID's fields.
	Node, Type, ID, User string
	// Running is true until the task ends.
	Running bool
	// ExitStatus is "OK" or the error a finished task failed with.
	ExitStatus string
	// Start and End are when the task started and ended.
	Start, End time.Time
}

// task is a PVE worker: it runs for its type's delay, then finishes under the
// simulator's lock.
type task struct {
	upid    UPID
	id      string
	running bool
	exit    string
	start   time.Time
	end     time.Time
	log     []string
}

// taskFunc finishes a task. fail is the failure FailNextTask injected, or nil; a
// taskFunc given one undoes what its handler prepared and returns the error the task
// ends with.
type taskFunc func(fail error) error

// failWith is a taskFunc for a task that fails with err whatever happens: the checks
// PVE makes in the worker rather than before it answers.
func failWith(err error) taskFunc {
	return func(error) error { return err }
}

// startTask forks a worker as PVE's fork_worker does and returns its UPID. The
// worker runs on the node the path names (the node serving the API for paths that
// name none), logs lines, waits for its type's delay, then runs finish with the
// simulator's lock held.
func (s *Simulator) startTask(c *call, typ, id string, finish taskFunc, lines ...string) string {
	return s.startWork(c, typ, id, nil, finish, lines...)
}

// startWork is startTask with work to do outside the lock first, such as a
// download; its error, if any, reaches finish as fail does.
func (s *Simulator) startWork(c *call, typ, id string, work func() error, finish taskFunc, lines ...string) string {
	node := c.node
	if node == "" || c.template == "POST /nodes/{node}/storage/{storage}/upload" {
		node = s.entry().name
	}
	s.pid++
	now := time.Now()
	t := &task{
		upid:    UPID{Node: node, PID: s.pid, PStart: nodeUptime*100 + s.pid%4096, StartTime: now.Unix(), Type: typ, ID: id, User: c.user},
		running: true, start: now, log: lines,
	}
	t.id = t.upid.String()
	s.tasks = append(s.tasks, t)
	delay, ok := s.opts.TaskDelays[typ]
	if !ok {
		delay = s.opts.TaskDelay
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		timer := time.NewTimer(delay)
		defer timer.Stop()
		var workErr error
		if work != nil {
			workErr = work()
		}
		select {
		case <-timer.C:
		case <-s.ctx.Done():
			workErr = errStopped
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		fail := workErr
		if q := s.failNext[typ]; fail == nil && len(q) > 0 {
			fail, s.failNext[typ] = fmt.Errorf("%s", q[0]), q[1:]
		}
		t.finish(finish(fail))
	}()
	return t.id
}

func (t *task) logf(format string, a ...any) { t.log = append(t.log, fmt.Sprintf(format, a...)) }

// finish records how the task ended; the last log line is what PVE's
// upid_read_status reads the exit status from.
func (t *task) finish(err error) {
	t.running, t.end = false, time.Now()
	if err != nil {
		t.exit = strings.TrimSpace(errText(err))
		t.logf("TASK ERROR: %s", t.exit)
		return
	}
	t.exit = "OK"
	t.logf("TASK OK")
}

// fields are the UPID's fields as PVE's task endpoints answer them: a token's tasks
// have the user and the token name apart.
func (t *task) fields() map[string]any {
	r := map[string]any{
		"upid": t.id, "node": t.upid.Node, "pid": t.upid.PID, "pstart": t.upid.PStart,
		"starttime": t.upid.StartTime, "type": t.upid.Type, "id": t.upid.ID, "user": t.upid.User,
	}
	if user, token, ok := strings.Cut(t.upid.User, "!"); ok {
		r["user"], r["tokenid"] = user, token
	}
	return r
}

func (t *task) listEntry() map[string]any {
	r := t.fields()
	if t.running {
		r["status"] = "RUNNING"
	} else {
		r["endtime"], r["status"] = t.end.Unix(), t.exit
	}
	return r
}

func (s *Simulator) findTask(c *call) (*task, error) {
	u, err := ParseUPID(c.params["upid"])
	if err != nil {
		return nil, paramErrorf("upid", "unable to parse worker upid")
	}
	for _, t := range s.tasks {
		if t.id == c.params["upid"] && u.Node == c.node {
			return t, nil
		}
	}
	return nil, paramErrorf("upid", "no such task")
}

func (s *Simulator) getTaskStatus(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	r := t.fields()
	r["status"] = "running"
	if !t.running {
		r["status"], r["exitstatus"] = "stopped", t.exit
	}
	return r, nil
}

// getTaskLog pages through a task's log: ?start is the first line (from 0), ?limit
// the number of lines (50); lines are numbered from 1.
func (s *Simulator) getTaskLog(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	start, limit := intParam(c, "start", 0), intParam(c, "limit", 50)
	out := []map[string]any{}
	for i := start; i < len(t.log) && i < start+limit; i++ {
		out = append(out, map[string]any{"n": i + 1, "t": t.log[i]})
	}
	if len(t.log) == 0 && start == 0 {
		out = append(out, map[string]any{"n": 1, "t": "no content"})
	}
	return out, nil
}

// getNodeTasks lists a node's tasks, newest first. ?source=archive (the default)
// lists finished tasks, active running ones, all both; typefilter, vmid, since and
// errors filter; start and limit page.
func (s *Simulator) getNodeTasks(c *call) (any, error) {
	source := c.params["source"]
	if source == "" {
		source = "archive"
	}
	start, limit := intParam(c, "start", 0), intParam(c, "limit", 50)
	since := int64(intParam(c, "since", 0))
	out := []map[string]any{}
	skipped := 0
	for i := len(s.tasks) - 1; i >= 0 && len(out) < limit; i-- {
		t := s.tasks[i]
		switch {
		case t.upid.Node != c.node,
			t.running && source == "archive", !t.running && source == "active",
			c.params["typefilter"] != "" && t.upid.Type != c.params["typefilter"],
			c.params["vmid"] != "" && t.upid.ID != c.params["vmid"],
			since > 0 && t.upid.StartTime < since,
			c.params["errors"] == "1" && (t.running || t.exit == "OK"):
			continue
		}
		if skipped < start {
			skipped++
			continue
		}
		out = append(out, t.listEntry())
	}
	return out, nil
}

// Tasks lists every task the simulator ran or runs, oldest first.
func (s *Simulator) Tasks() []Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, Task{
			UPID: t.id, Node: t.upid.Node, Type: t.upid.Type, ID: t.upid.ID, User: t.upid.User,
			Running: t.running, ExitStatus: t.exit, Start: t.start, End: t.end,
		})
	}
	return out
}

func intParam(c *call, name string, def int) int {
	n, err := strconv.Atoi(c.params[name])
	if err != nil || n < 0 {
		return def
	}
	return n
}
