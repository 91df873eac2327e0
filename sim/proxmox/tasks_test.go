package proxmoxsim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	proxmox "github.com/luthermonson/go-proxmox"
)

func TestUPIDsParseAsPVEParsesThem(t *testing.T) {
	tests := []struct {
		name    string
		upid    string
		want    UPID
		wantErr bool
	}{
		{name: "a clone by an API token", upid: "UPID:pve1:0001A2B3:00D3F1A0:66F0A1B2:qmclone:9000:root@pam!banlieue:",
			want: UPID{Node: "pve1", PID: 0x1a2b3, PStart: 0xd3f1a0, StartTime: 0x66f0a1b2, Type: "qmclone", ID: "9000", User: "root@pam!banlieue"}},
		{name: "an upload has no ID", upid: "UPID:pve-2:00000010:000000001:66F0A1B2:imgcopy::root@pam:",
			want: UPID{Node: "pve-2", PID: 0x10, PStart: 1, StartTime: 0x66f0a1b2, Type: "imgcopy", User: "root@pam"}},
		{name: "the trailing colon is required", upid: "UPID:pve1:0001A2B3:00D3F1A0:66F0A1B2:qmclone:9000:root@pam", wantErr: true},
		{name: "a short PID is refused", upid: "UPID:pve1:1A2B3:00D3F1A0:66F0A1B2:qmclone:9000:root@pam:", wantErr: true},
		{name: "a node name cannot end in a dash", upid: "UPID:pve-:0001A2B3:00D3F1A0:66F0A1B2:qmclone:9000:root@pam:", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUPID(tt.upid)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseUPID error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseUPID (-want +got):\n%s", diff)
			}
			if again, _ := ParseUPID(got.String()); err == nil && again != got {
				t.Errorf("String() = %s parses to %+v", got.String(), again)
			}
		})
	}
}

// FuzzParseUPID checks that whatever parses prints back to a UPID that parses to the
// same fields.
func FuzzParseUPID(f *testing.F) {
	f.Add("UPID:pve1:0001A2B3:00D3F1A0:66F0A1B2:qmclone:9000:root@pam!banlieue:")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUPID(s)
		if err != nil {
			return
		}
		again, err := ParseUPID(u.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, u.String(), err)
		}
		if diff := cmp.Diff(u, again); diff != "" {
			t.Errorf("round trip of %q (-first +second):\n%s", s, diff)
		}
	})
}

func TestTasksRunThenStopWithTheirExitStatus(t *testing.T) {
	s := start(t, Options{TaskDelays: map[string]time.Duration{"qmclone": 200 * time.Millisecond}})
	ctx := context.Background()
	c := client(t, s)
	tpl := template(t, c)
	_, task, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101})
	if err != nil {
		t.Fatal(err)
	}
	u, err := ParseUPID(string(task.UPID))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"pve1", "qmclone", "9000", s.TokenID}, []string{u.Node, u.Type, u.ID, u.User}); diff != "" {
		t.Errorf("UPID fields (-want +got):\n%s", diff)
	}
	if err := task.Ping(ctx); err != nil || !task.IsRunning || task.Status != "running" {
		t.Errorf("right after the request: status %q, running %v, %v; want running", task.Status, task.IsRunning, err)
	}
	must(t)(task, nil)
	if !task.IsSuccessful || task.ExitStatus != "OK" {
		t.Errorf("finished: exit status %q, want OK", task.ExitStatus)
	}
	log, err := task.Log(ctx, 0, 50)
	if err != nil || log[len(log)-1] != "TASK OK" || !strings.HasPrefix(log[0], "create linked clone of VM 9000") {
		t.Errorf("log %v, %v; want the clone's lines ending in TASK OK", log, err)
	}

	s.FailNextTask("qmclone", "storage 'local-lvm' is full")
	_, task, err = tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 102})
	err = wait(t)(task, err)
	if !proxmox.IsTaskFailed(err) || task.ExitStatus != "clone failed: storage 'local-lvm' is full" {
		t.Errorf("injected failure: %v, exit status %q", err, task.ExitStatus)
	}
	if _, ok := s.VM(102); ok {
		t.Error("the failed clone left its VM behind")
	}
	got := map[string]int{}
	for _, tk := range s.Tasks() {
		got[tk.Type+" "+tk.ExitStatus]++
	}
	if diff := cmp.Diff(map[string]int{"qmclone OK": 1, "qmclone clone failed: storage 'local-lvm' is full": 1}, got); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	history, err := c.NodeRef("pve1").Tasks(ctx, &proxmox.NodeTasksOptions{Source: "all", TypeFilter: "qmclone"})
	if err != nil || len(history) != 2 {
		t.Errorf("task history: %d tasks, %v; want 2", len(history), err)
	}
}

// /cluster/tasks lists what each node broadcasts of its tasks, as PVE does: its running
// tasks and its latest 25 ended ones, newest first, with the oldest dropped until the
// node's list is under 32 KiB of JSON. A busy node's oldest running tasks are thus left
// out, which only its own task list shows.
func TestTheClusterTaskListIsCutAsPVECutsIt(t *testing.T) {
	s := &Simulator{}
	start := time.Now().Add(-time.Hour)
	add := func(node string, n int, running bool) {
		for range n {
			start = start.Add(time.Second)
			u := UPID{Node: node, PID: uint64(len(s.tasks) + 1), PStart: 1, StartTime: start.Unix(), Type: "qmclone", ID: "9000", User: "root@pam"}
			tk := &task{upid: u, id: u.String(), running: running, start: start}
			if !running {
				tk.exit, tk.end = "OK", start.Add(time.Millisecond)
			}
			s.tasks = append(s.tasks, tk)
		}
	}
	add("pve1", 40, false)
	add("pve1", 400, true) // far more than 32 KiB of them
	add("pve2", 3, true)
	add("pve2", 40, false)
	got, err := s.getClusterTasks(nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]map[bool][]int64{"pve1": {}, "pve2": {}}
	size := map[string]int{}
	for _, e := range got.([]map[string]any) {
		node := e["node"].(string)
		running := e["status"] == "RUNNING"
		listed[node][running] = append(listed[node][running], e["starttime"].(int64))
		b, _ := json.Marshal(e)
		size[node] += len(b) + 1
	}
	newestRunning := s.tasks[439].upid.StartTime
	switch {
	case len(listed["pve1"][false]) != 0:
		t.Errorf("pve1 lists %d ended tasks, all older than its running ones, which fill its list", len(listed["pve1"][false]))
	case len(listed["pve1"][true]) == 0 || len(listed["pve1"][true]) == 400:
		t.Errorf("pve1 lists %d of its 400 running tasks, want as many as 32 KiB holds", len(listed["pve1"][true]))
	case listed["pve1"][true][0] != newestRunning:
		t.Errorf("pve1's first listed task started at %d, want the newest, %d", listed["pve1"][true][0], newestRunning)
	case size["pve1"] >= 32*1024:
		t.Errorf("pve1's list is %d bytes, want under 32 KiB", size["pve1"])
	case len(listed["pve2"][true]) != 3 || len(listed["pve2"][false]) != 25:
		t.Errorf("pve2 lists %d running and %d ended tasks, want 3 and 25", len(listed["pve2"][true]), len(listed["pve2"][false]))
	}
}

// A task's status is read by its UPID on the node that runs it; another node, or a
// UPID no node ran, has no such task.
func TestATasksStatusIsOnItsOwnNode(t *testing.T) {
	s := start(t, Options{})
	c := client(t, s)
	_, task, err := template(t, c).Clone(context.Background(), &proxmox.VirtualMachineCloneOptions{NewID: 101})
	must(t)(task, err)
	unknown := UPID{Node: "pve1", PID: 1, PStart: 1, StartTime: 1, Type: "qmclone", ID: "9000", User: "root@pam"}.String()
	tests := []struct {
		name, node, upid string
		want             string
	}{
		{name: "its own node", node: "pve1", upid: string(task.UPID), want: "stopped"},
		{name: "another node", node: "pve2", upid: string(task.UPID), want: "no such task"},
		{name: "a UPID no node ran", node: "pve1", upid: unknown, want: "no such task"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st map[string]any
			err := c.Get(context.Background(), "/nodes/"+tt.node+"/tasks/"+tt.upid+"/status", &st)
			got := fmt.Sprint(st["status"])
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("status of %s on %s: %q, want %q", tt.upid, tt.node, got, tt.want)
			}
		})
	}
}
