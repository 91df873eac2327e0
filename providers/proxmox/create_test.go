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

	res, err := s.Create(context.Background(), m, providersdk.Observation{})
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
	if _, err := first.Create(context.Background(), m, providersdk.Observation{}); err != nil {
		t.Fatal(err)
	}
	// The provider dies before it records the task: a new session sees only the machine.
	// Its Create reuses Observe's listing, whose lock fields show the clone in flight.
	second := connect(t, sim, newDriver(sim))
	o, err := second.Observe(context.Background(), m)
	if err != nil || o.Exists {
		t.Fatalf("Observe mid-clone without the task = %+v, %v; want no VM yet", o, err)
	}
	res, err := second.Create(context.Background(), m, providersdk.Observation{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Task.InFlight() {
		t.Fatal("Create during the first clone started nothing and waits for nothing")
	}
	converge(t, second, m)
	theVM(t, sim)
	if clones := clonesIn(sim); clones != 1 {
		t.Errorf("%d clone tasks, want 1", clones)
	}
}

// A crashed provider's clone that ends between Observe and Create is the machine's VM,
// though Observe's listing showed it locked and nameless and pendingClone no longer sees
// it run: Create must list again rather than clone a second VM.
func TestCloneOfACrashedProviderEndingBeforeCreateIsNotClonedAgain(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmclone": 300 * time.Millisecond}
	})
	m := newMachine("9e3f4a51-0000-4000-8000-000000000015")
	first := connect(t, sim, newDriver(sim))
	if _, err := first.Create(context.Background(), m, providersdk.Observation{}); err != nil {
		t.Fatal(err)
	}
	second := connect(t, sim, newDriver(sim))
	if o, err := second.Observe(context.Background(), m); err != nil || o.Exists {
		t.Fatalf("Observe mid-clone without the task = %+v, %v; want no VM yet", o, err)
	}
	time.Sleep(time.Second) // the first clone ends; the kept listing is still fresh
	if _, err := second.Create(context.Background(), m, providersdk.Observation{}); err != nil {
		t.Fatal(err)
	}
	if clones := clonesIn(sim); clones != 1 {
		t.Errorf("%d clone tasks, want 1: Create cloned again beside the ended clone", clones)
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
	first, err := s.Create(context.Background(), m1, providersdk.Observation{})
	if err != nil || !first.Task.InFlight() {
		t.Fatalf("Create = %+v, %v", first, err)
	}
	second, err := s.Create(context.Background(), m2, providersdk.Observation{})
	if err != nil || !second.Task.InFlight() || second.Task.Ref == first.Task.Ref {
		t.Fatalf("Create of another machine = %+v, %v; want its own clone, not %s", second, err, first.Task.Ref)
	}
	// The first machine, asking again before it recorded its task, waits for its clone.
	again, err := s.Create(context.Background(), m1, providersdk.Observation{})
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

// Create reads the cluster's listing that the Observe of the same reconcile read when
// it is at most listingReuse old, and lists the cluster itself otherwise.
func TestCreateReusesObservesListing(t *testing.T) {
	tests := []struct {
		name    string
		observe bool
		// wait is how far the clock moves between Observe and Create.
		wait time.Duration
		want int
	}{
		{name: "Observe then Create", observe: true, want: 1},
		{name: "Create within the validity", observe: true, wait: listingReuse, want: 1},
		{name: "Create after the validity", observe: true, wait: listingReuse + time.Millisecond, want: 2},
		{name: "Create alone", want: 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			sim := proxmoxtest.Start(t)
			d := newDriver(sim)
			start, offset := time.Now(), time.Duration(0)
			d.now = func() time.Time { return start.Add(offset) } // moves only when the test moves it
			s := connect(t, sim, d)
			m := newMachine(fmt.Sprintf("5c6d7e8f-0000-4000-8000-%012d", i))
			lists := countCalls(sim, listOp)
			if tt.observe {
				if o, err := s.Observe(ctx, m); err != nil || o.Exists {
					t.Fatalf("Observe = %+v, %v; want no VM", o, err)
				}
			}
			offset = tt.wait
			res, err := s.Create(ctx, m, providersdk.Observation{})
			if err != nil || !res.Task.InFlight() {
				t.Fatalf("Create = %+v, %v; want the clone task", res, err)
			}
			if n := lists.since(t); n != tt.want {
				t.Errorf("listed the cluster %d times, want %d", n, tt.want)
			}
			if n := len(s.listings); n != 0 {
				t.Errorf("%d listings kept after Create, want 0", n)
			}
			converge(t, s, m)
			theVM(t, sim)
		})
	}
}

// Listings kept for machines that are observed but never created are dropped once
// they are too old to reuse, when the next one is kept.
func TestKeptListingsDoNotPileUp(t *testing.T) {
	ctx := context.Background()
	sim := proxmoxtest.Start(t)
	d := newDriver(sim)
	start, offset := time.Now(), time.Duration(0)
	d.now = func() time.Time { return start.Add(offset) }
	s := connect(t, sim, d)
	observe := func(i int) {
		t.Helper()
		if o, err := s.Observe(ctx, newMachine(fmt.Sprintf("6d7e8f90-0000-4000-8000-%012d", i))); err != nil || o.Exists {
			t.Fatalf("Observe = %+v, %v; want no VM", o, err)
		}
	}
	for i := range 3 {
		observe(i)
	}
	if n := len(s.listings); n != 3 {
		t.Fatalf("%d listings kept for 3 machines just observed, want 3", n)
	}
	offset = listingReuse + time.Millisecond
	observe(3)
	if n := len(s.listings); n != 1 {
		t.Errorf("%d listings kept once the first 3 are stale, want 1", n)
	}
}

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
