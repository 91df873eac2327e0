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
	// stop ends the running task as a signal ends a PVE worker (DELETE
	// /nodes/{node}/tasks/{upid}); it closes once.
	stop chan struct{}
}

// taskFunc finishes a task. fail is the failure FailNextTask injected, or nil; a
// taskFunc given one undoes what its handler prepared and returns the error the task
// ends with.
type taskFunc func(fail error) error

// worker is what a task does, in PVE's order: take its locks, make its own checks,
// run, finish.
type worker struct {
	// locks are taken in order when the worker starts, each waiting up to its timeout;
	// one not had fails the task with lock_file_full's "got timeout".
	locks []lockSpec
	// begin runs with the simulator's lock held once the locks are had: the checks the
	// worker makes again and its first writes (a clone's temporary config). An error
	// ends the task, and finish does not run.
	begin func() error
	// work runs outside the simulator's lock while the task's delay passes, such as a
	// download; its error reaches finish as fail does.
	work   func() error
	finish taskFunc
}

// startTask forks a worker as PVE's fork_worker does and returns its UPID. The
// worker runs on the node the path names (the node serving the API for paths that
// name none), logs lines, waits for its type's delay, then runs finish with the
// simulator's lock held.
func (s *Simulator) startTask(c *call, typ, id string, finish taskFunc, lines ...string) string {
	return s.fork(c, typ, id, worker{finish: finish}, lines...)
}

// startWork is startTask with work to do outside the lock first, such as a
// download; its error, if any, reaches finish as fail does.
func (s *Simulator) startWork(c *call, typ, id string, work func() error, finish taskFunc, lines ...string) string {
	return s.fork(c, typ, id, worker{work: work, finish: finish}, lines...)
}

// fork starts the task w and returns its UPID. The worker starts ForkDelay after the
// request; with no ForkDelay and its locks free, its first step (locks, begin) is
// taken before the request answers, so a client sees a clone's config as soon as it
// has the UPID. Otherwise another request may come in between, as on PVE, whose
// workers take their locks some milliseconds after the API answered. The type's delay
// runs from when the locks are had; they are released when the task ends.
func (s *Simulator) fork(c *call, typ, id string, w worker, lines ...string) string {
	node := c.node
	if node == "" || c.template == "POST /nodes/{node}/storage/{storage}/upload" {
		node = s.entry().name
	}
	s.pid++
	now := time.Now()
	t := &task{
		upid:    UPID{Node: node, PID: s.pid, PStart: nodeUptime*100 + s.pid%4096, StartTime: now.Unix(), Type: typ, ID: id, User: c.user},
		running: true, start: now, log: lines, stop: make(chan struct{}),
	}
	t.id = t.upid.String()
	s.tasks = append(s.tasks, t)
	s.taskIDs[t.id] = t
	delay, ok := s.opts.TaskDelays[typ]
	if !ok {
		delay = s.opts.TaskDelay
	}
	// Workers try their locks in the order they were forked, as PVE's, forked some
	// milliseconds apart, do.
	startAt, prev, tried := now.Add(s.opts.ForkDelay), s.lastFork, make(chan struct{})
	s.lastFork = tried
	begun := s.opts.ForkDelay <= 0 && s.tryLocks(w.locks)
	if begun {
		close(tried)
	}
	if begun && w.begin != nil {
		if err := w.begin(); err != nil {
			s.unlockAll(w.locks)
			t.finish(err)
			return t.id
		}
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		if !begun && !s.startWorker(t, w, startAt, prev, tried) {
			return
		}
		timer := time.NewTimer(delay)
		defer timer.Stop()
		var workErr error
		if w.work != nil {
			workErr = w.work()
		}
		select {
		case <-timer.C:
		case <-s.ctx.Done():
			workErr = errStopped
		case <-t.stop:
			workErr = errStopped
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		fail := workErr
		if q := s.failNext[typ]; fail == nil && len(q) > 0 {
			fail, s.failNext[typ] = fmt.Errorf("%s", q[0]), q[1:]
		}
		t.finish(w.finish(fail))
		s.unlockAll(w.locks)
	}()
	return t.id
}

// startWorker is a worker's first step when the request could not take it: wait
// until startAt (ForkDelay after the request) and until the worker forked before
// (prev) has tried its locks, try them (tried), wait for them, begin. It reports
// whether the task goes on; when it does not, the task has ended.
func (s *Simulator) startWorker(t *task, w worker, startAt time.Time, prev, tried chan struct{}) bool {
	timer := time.NewTimer(time.Until(startAt))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.ctx.Done():
	}
	select {
	case <-prev:
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := errStopped
	if s.ctx.Err() == nil {
		if s.tryLocks(w.locks) {
			err = nil
		}
		close(tried)
		if err != nil {
			err = s.waitLocks(t, w.locks)
		}
	} else {
		close(tried)
	}
	if err == nil && w.begin != nil {
		if err = w.begin(); err != nil {
			s.unlockAll(w.locks)
		}
	}
	if err != nil {
		t.finish(err)
		return false
	}
	return true
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
	if t := s.taskIDs[c.params["upid"]]; t != nil && u.Node == c.node {
		return t, nil
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
