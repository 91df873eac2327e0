package proxmox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

func TestFailedCloneIsTaskFailedThenRetried(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	m := newMachine("7c1d2e3f-0000-4000-8000-000000000001")
	sim.FailNextTask("qmclone", "storage 'local-lvm' is full")

	res, err := s.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = settle(t, s, m, res.Task)
	if msg := wantErr(func(err error) bool {
		var tf *providersdk.TaskFailedError
		return errors.As(err, &tf) && tf.Task.Ref == res.Task.Ref
	}, "clone failed: storage 'local-lvm' is full", "")(err); msg != "" {
		t.Fatal(msg)
	}
	converge(t, s, m)
	theVM(t, sim)
}

func TestCrashMidCloneAdoptsTheClone(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
	})
	m := newMachine("8d2e3f40-0000-4000-8000-000000000002")
	first := connect(t, sim, newDriver(sim))
	if _, err := first.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// The provider dies before it records the task: a new session sees only the machine.
	second := connect(t, sim, newDriver(sim))
	o, err := second.Observe(context.Background(), m)
	if err != nil || o.Exists {
		t.Fatalf("Observe mid-clone without the task = %+v, %v; want no VM yet", o, err)
	}
	res, err := second.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Task.InFlight() {
		t.Fatal("Create during the first clone started nothing and waits for nothing")
	}
	converge(t, second, m)
	theVM(t, sim)
	clones := 0
	for _, task := range sim.Tasks() {
		if task.Type == "qmclone" {
			clones++
		}
	}
	if clones != 1 {
		t.Errorf("%d clone tasks, want 1", clones)
	}
}

// A session knows the clones it started: another machine's Create does not take one of
// them for its own (as after a crash it would have to) but clones at once.
func TestCreateDoesNotWaitForTheSessionsCloneOfAnotherMachine(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
	})
	s := connect(t, sim, newDriver(sim))
	m1, m2 := newMachine("3a4b5c6d-0000-4000-8000-000000000013"), newMachine("4b5c6d7e-0000-4000-8000-000000000014")
	first, err := s.Create(context.Background(), m1)
	if err != nil || !first.Task.InFlight() {
		t.Fatalf("Create = %+v, %v", first, err)
	}
	second, err := s.Create(context.Background(), m2)
	if err != nil || !second.Task.InFlight() || second.Task.Ref == first.Task.Ref {
		t.Fatalf("Create of another machine = %+v, %v; want its own clone, not %s", second, err, first.Task.Ref)
	}
	// The first machine, asking again before it recorded its task, waits for its clone.
	again, err := s.Create(context.Background(), m1)
	if err != nil || again.Task.Ref != first.Task.Ref {
		t.Fatalf("Create again = %+v, %v; want to wait for %s", again, err, first.Task.Ref)
	}
}

// Concurrent workers of one session take turns for VMIDs: no clone request is ever
// refused for a VMID another worker was handed too, and each asks /cluster/nextid once.
func TestConcurrentCreatesGetDistinctVMIDs(t *testing.T) {
	const n = 20
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	const cloneOp = "POST /nodes/{node}/qemu/{vmid}/clone"
	refusedBefore := backendCalls(cloneOp, "error")
	nextIDs, clones := countCalls(sim, "GET /cluster/nextid"), countCalls(sim, cloneOp)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMachine(fmt.Sprintf("9e3f4051-0000-4000-8000-%012d", i))
			m.Name = fmt.Sprintf("web-%d", i)
			<-start
			if _, err := reconcile(t, s, m); err != nil {
				t.Errorf("machine %s: %v", m.Name, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	seen := map[int]bool{}
	names := map[string]bool{}
	for _, vm := range sim.VMs() {
		if vm.Template {
			continue
		}
		seen[vm.VMID] = true
		names[vm.Name] = true
	}
	if len(seen) != n || len(names) != n {
		t.Errorf("%d VMIDs and %d names for %d machines, want %d of each", len(seen), len(names), n, n)
	}
	if refused := backendCalls(cloneOp, "error") - refusedBefore; refused != 0 {
		t.Errorf("%v clone requests refused, want none", refused)
	}
	asked, cloned := nextIDs.since(t), clones.since(t)
	if cloned != n || asked != n {
		t.Errorf("%d VMIDs asked for and %d clones requested for %d machines, want %d of each", asked, cloned, n, n)
	}
}
