package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

func TestFailedCloneIsTaskFailedThenRetried(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	m := newMachine("7c1d2e3f-0000-4000-8000-000000000001")
	sim.FailNextTask("qmclone", "storage 'local-lvm' is full")

	task, err := observeCreate(t, s, m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = settle(t, s, m, task)
	if msg := wantErr(func(err error) bool {
		var tf *providersdk.TaskFailedError
		return errors.As(err, &tf) && tf.Task.Ref == task.Ref
	}, "clone failed: storage 'local-lvm' is full", "")(err); msg != "" {
		t.Fatal(msg)
	}
	converge(t, s, m)
	theVM(t, sim)
}

// crashAfterCreate is a provider that starts the machine's clone and dies before it
// writes any status: a new session sees only the machine, with neither the clone's
// task nor where its VM goes.
func crashAfterCreate(t *testing.T, sim *proxmoxtest.Simulator, m *providersdk.Machine) providersdk.Task {
	t.Helper()
	task, err := observeCreate(t, connect(t, sim, newDriver(sim)), m)
	if err != nil || !task.InFlight() {
		t.Fatalf("Create = %+v, %v; want the clone task", task, err)
	}
	m.Task = providersdk.Task{}
	unstructured.RemoveNestedField(m.Object.Object, "status", "proxmox")
	return task
}

func TestCrashMidCloneAdoptsTheClone(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
	})
	m := newMachine("8d2e3f40-0000-4000-8000-000000000002")
	clone := crashAfterCreate(t, sim, m)
	// Observe finds no VM by the machine's identity, but a VM locked by a clone: the
	// template's node's running tasks show the clone, which it reports in flight, so no
	// Create follows.
	second := connect(t, sim, newDriver(sim))
	o, err := second.Observe(context.Background(), m)
	if err != nil || !o.Exists || o.Task.Ref != clone.Ref {
		t.Fatalf("Observe mid-clone without the task = %+v, %v; want clone %s in flight", o, err, clone.Ref)
	}
	converge(t, second, m)
	theVM(t, sim)
	if clones := clonesIn(sim); clones != 1 {
		t.Errorf("%d clone tasks, want 1", clones)
	}
}

// A crashed provider's clone is the machine's VM, though it is locked and nameless in
// the listing Observe reads: whenever it ends, the machine is never cloned again.
func TestCloneOfACrashedProviderIsNotClonedAgainWhenItEnds(t *testing.T) {
	t.Run("a clone that ends between Observe and Create is waited for", func(t *testing.T) {
		sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.TaskDelays = map[string]time.Duration{"qmclone": 300 * time.Millisecond}
		})
		m := newMachine("9e3f4a51-0000-4000-8000-000000000015")
		clone := crashAfterCreate(t, sim, m)
		second := connect(t, sim, newDriver(sim))
		o, err := second.Observe(context.Background(), m)
		if err != nil || o.Task.Ref != clone.Ref {
			t.Fatalf("Observe mid-clone without the task = %+v, %v; want clone %s in flight", o, err, clone.Ref)
		}
		waitForClones(t, sim) // the reconciler would not call Create; one that did anyway
		res, err := second.Create(context.Background(), m, o)
		if err != nil || res.Task.Ref != clone.Ref {
			t.Fatalf("Create = %+v, %v; want to wait for clone %s", res, err, clone.Ref)
		}
		if clones := clonesIn(sim); clones != 1 {
			t.Errorf("%d clone tasks, want 1: Create cloned again beside the ended clone", clones)
		}
	})

	t.Run("a clone that ends after Observe's listing, before its tasks are read, is found", func(t *testing.T) {
		sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.TaskDelays = map[string]time.Duration{"qmclone": 300 * time.Millisecond}
		})
		m := newMachine("af405b62-0000-4000-8000-000000000016")
		crashAfterCreate(t, sim, m)
		d := newDriver(sim)
		d.wrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				if strings.HasSuffix(r.URL.Path, "/tasks") { // the node's running tasks
					waitForClones(t, sim)
				}
				return next.RoundTrip(r)
			})
		}
		second := connect(t, sim, d)
		lists := countCalls(sim, listOp)
		o, err := second.Observe(context.Background(), m)
		if err != nil || !o.Exists || o.Task.InFlight() || o.ProviderID == "" {
			t.Fatalf("Observe = %+v, %v; want the clone's VM", o, err)
		}
		if n := lists.since(t); n != 2 {
			t.Errorf("Observe listed the cluster %d times, want 2: the second after the clone ended", n)
		}
		if clones := clonesIn(sim); clones != 1 {
			t.Errorf("%d clone tasks, want 1", clones)
		}
	})
}

// A crashed provider's clone that still runs is found on a node running more tasks than
// PVE's /cluster/tasks lists (it drops a node's oldest until the list is under 32 KiB):
// the machine waits for it instead of being cloned again.
func TestACrashedProvidersCloneIsFoundAmongManyRunningTasks(t *testing.T) {
	const busy = "busy-tpl"
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.Templates = map[string]string{proxmoxtest.TemplateName: proxmoxtest.Node1, busy: proxmoxtest.Node1}
		// The crashed clone must still run when the 200 others are made, however slowly
		// (seconds under the race detector); the simulator ends it when the test does.
		o.TaskDelays = map[string]time.Duration{"qmclone": time.Minute}
	})
	m := newMachine("0b1c2d3e-0000-4000-8000-000000000031")
	clone := crashAfterCreate(t, sim, m)
	// Another client clones another template 200 times: each running clone is newer
	// than the crashed one, and none is of the machine's template.
	var source int
	for _, vm := range sim.VMs() {
		if vm.Name == busy {
			source = vm.VMID
		}
	}
	other := connect(t, sim, newDriver(sim))
	for i := range 200 {
		if _, err := other.api.Clone(context.Background(), proxmoxtest.Node1, source, pve.CloneOptions{NewID: 5000 + i, Name: fmt.Sprintf("busy-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	second := connect(t, sim, newDriver(sim))
	o, err := second.Observe(context.Background(), m)
	if err != nil || !o.Exists || o.Task.Ref != clone.Ref {
		t.Fatalf("Observe = %+v, %v; want clone %s in flight", o, err, clone.Ref)
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
	first, err := observeCreate(t, s, m1)
	if err != nil || !first.InFlight() {
		t.Fatalf("Create = %+v, %v", first, err)
	}
	second, err := observeCreate(t, s, m2)
	if err != nil || !second.InFlight() || second.Ref == first.Ref {
		t.Fatalf("Create of another machine = %+v, %v; want its own clone, not %s", second, err, first.Ref)
	}
	// The first machine, observed again before it recorded its task, waits for its clone.
	again, err := observeCreate(t, s, m1)
	if err != nil || again.Ref != first.Ref {
		t.Fatalf("Create again = %+v, %v; want to wait for %s", again, err, first.Ref)
	}
}

// Concurrent workers of one session get distinct VMIDs from the driver's pool without
// waiting for one another's clone requests: no clone request is ever refused for a
// VMID another worker was handed too, /cluster/nextid is asked once for them all, and
// the clone requests are in flight together.
func TestConcurrentCreatesGetDistinctVMIDs(t *testing.T) {
	const n = 20
	// Each clone request is answered after a pause, as a loaded PVE answers.
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) { o.ForkDelay = 200 * time.Millisecond })
	d := newDriver(sim)
	var (
		mu             sync.Mutex
		inFlight, most int
	)
	d.wrapTransport = func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/clone") {
				return next.RoundTrip(r)
			}
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
			return next.RoundTrip(r)
		})
	}
	s := connect(t, sim, d)
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
	if asked, cloned := nextIDs.since(t), clones.since(t); cloned != n || asked != 1 {
		t.Errorf("%d VMIDs asked for and %d clones requested for %d machines, want 1 and %d", asked, cloned, n, n)
	}
	if most < 2 {
		t.Errorf("at most %d clone request in flight at once, want the workers' requests together", most)
	}
}

// Create works from the listing Observe read in the same reconcile and lists the
// cluster no more; the node's running tasks are read only while a VM is locked by a
// clone the session did not start.
func TestCreateTakesObservesListing(t *testing.T) {
	tests := []struct {
		name string
		// cloning starts another machine's clone from the same session first;
		// foreign, from another session, as a crashed provider would have.
		cloning, foreign bool
		lists, taskList  int
	}{
		{name: "a new machine costs Observe's listing alone", lists: 1},
		{name: "the session's clone of another machine in flight costs no more", cloning: true, lists: 1},
		{name: "another client's clone in flight costs the node's tasks, no listing more", foreign: true, lists: 1, taskList: 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
				o.TaskDelays = map[string]time.Duration{"qmclone": 300 * time.Millisecond}
			})
			s := connect(t, sim, newDriver(sim))
			other := newMachine(fmt.Sprintf("5c6d7e8f-0000-4000-8000-1%011d", i))
			switch {
			case tt.cloning:
				if task, err := observeCreate(t, s, other); err != nil || !task.InFlight() {
					t.Fatalf("Create of the other machine = %+v, %v", task, err)
				}
			case tt.foreign:
				crashAfterCreate(t, sim, other)
			}
			m := newMachine(fmt.Sprintf("5c6d7e8f-0000-4000-8000-%012d", i))
			lists, tasks := countCalls(sim, listOp), countCalls(sim, "GET /nodes/{node}/tasks")
			if task, err := observeCreate(t, s, m); err != nil || !task.InFlight() || task.Operation != providersdk.OperationClone {
				t.Fatalf("Create = %+v, %v; want the clone task", task, err)
			}
			if n := lists.since(t); n != tt.lists {
				t.Errorf("listed the cluster %d times, want %d", n, tt.lists)
			}
			if n := tasks.since(t); n != tt.taskList {
				t.Errorf("read the node's tasks %d times, want %d", n, tt.taskList)
			}
		})
	}
}

// Create handed no Observation from Observe fails rather than clone blind.
func TestCreateWithoutObserveFails(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	m := newMachine("6d7e8f90-0000-4000-8000-000000000017")
	if res, err := s.Create(context.Background(), m, providersdk.Observation{}); err == nil || res.Task.InFlight() {
		t.Fatalf("Create = %+v, %v; want an error", res, err)
	}
	if clones := clonesIn(sim); clones != 0 {
		t.Errorf("%d clone tasks, want none", clones)
	}
}

// The session remembers the clones it started for cloneMemory, then forgets them, so
// its record does not grow with every VM it ever made.
func TestStartedClonesAreForgottenAfterCloneMemory(t *testing.T) {
	sim := proxmoxtest.Start(t)
	d := newDriver(sim)
	start, offset := time.Now(), time.Duration(0)
	d.now = func() time.Time { return start.Add(offset) }
	s := connect(t, sim, d)
	s.cloneStarted("UPID:old", "a", 100)
	offset = cloneMemory + time.Second
	s.cloneStarted("UPID:new", "b", 101)
	if _, ok := s.cloneOwner("UPID:old"); ok {
		t.Error("a clone started more than cloneMemory ago is still remembered")
	}
	if owner, ok := s.cloneOwner("UPID:new"); !ok || owner != "b" {
		t.Errorf("cloneOwner of the new clone = %q, %v; want b", owner, ok)
	}
}

// waitForClones waits until no clone task runs in the simulator.
func waitForClones(t *testing.T, sim *proxmoxtest.Simulator) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		running := false
		for _, task := range sim.Tasks() {
			running = running || (task.Type == "qmclone" && task.Running)
		}
		if !running {
			return
		}
	}
	t.Error("clone tasks still run after 10s")
}

// roundTripperFunc adapts a function to an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// clonesIn counts the clone tasks the simulator ran.
func clonesIn(sim *proxmoxtest.Simulator) int {
	n := 0
	for _, task := range sim.Tasks() {
		if task.Type == "qmclone" {
			n++
		}
	}
	return n
}
