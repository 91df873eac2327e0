package proxmox

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// listOp is the backend call that lists every guest of the cluster.
const listOp = "GET /cluster/resources"

// backendCalls reads banlieue_backend_calls_total for one of the driver's calls.
func backendCalls(op, result string) float64 {
	var m dto.Metric
	if err := providersdk.BackendCalls.WithLabelValues(ProviderClass, op, result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// callCounter counts the driver's calls of one kind from now on, both in the backend
// call metric and as the simulator served them, and checks that the two agree.
type callCounter struct {
	sim    *proxmoxtest.Simulator
	op     string
	metric float64
	served int
}

func countCalls(sim *proxmoxtest.Simulator, op string) *callCounter {
	return &callCounter{sim: sim, op: op, metric: backendCalls(op, "ok") + backendCalls(op, "error"), served: sim.Requests()[op]}
}

// since is how many calls were made since countCalls or the last since.
func (c *callCounter) since(t *testing.T) int {
	t.Helper()
	metric, served := backendCalls(c.op, "ok")+backendCalls(c.op, "error"), c.sim.Requests()[c.op]
	n := int(metric - c.metric)
	if served-c.served != n {
		t.Errorf("%s: the metric counted %d calls, the simulator served %d", c.op, n, served-c.served)
	}
	c.metric, c.served = metric, served
	return n
}

// deleteAll observes the machine and deletes its VM, settling each task Delete
// starts, until no VM is left, failing the test on an error.
func deleteAll(t *testing.T, s *session, m *providersdk.Machine) {
	t.Helper()
	for range 10 {
		task, err := observeDelete(t, s, m)
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if !task.InFlight() {
			return
		}
		if _, err := settle(t, s, m, task); err != nil {
			t.Fatalf("Observe: %v", err)
		}
	}
	t.Fatal("Delete still starts tasks after 10 calls")
}

// noVMs fails the test unless the simulator holds templates only.
func noVMs(t *testing.T, sim *proxmoxtest.Simulator) {
	t.Helper()
	for _, vm := range sim.VMs() {
		if !vm.Template {
			t.Errorf("VM %d (%s) is left on %s", vm.VMID, vm.Name, vm.Node)
		}
	}
}

// A machine whose status says where its VM is is reconciled without listing the
// cluster: its VM's config is read where status.proxmox says, by a new session that has
// never seen the machine, through Observe, Update and Delete.
func TestRecordedLocationIsReadWithoutListing(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	m := newMachine("a1b2c3d4-0000-4000-8000-00000000000a")
	converge(t, connect(t, sim, newDriver(sim)), m)
	vm := theVM(t, sim)
	if got := recordedLocation(m); got != (location{node: proxmoxtest.Node1, vmid: vm.VMID}) {
		t.Fatalf("status.proxmox = %+v, want pve1/%d", got, vm.VMID)
	}

	s := connect(t, sim, newDriver(sim)) // a restarted provider: it knows the machine only
	lists := countCalls(sim, listOp)

	o, err := s.Observe(ctx, m)
	if err != nil || !o.Exists || !o.UpToDate || o.FailureDomain != proxmoxtest.Node1 {
		t.Fatalf("Observe = %+v, %v; want the VM, up to date, on pve1", o, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("Observe listed the cluster %d times, want 0", n)
	}

	// Update acts on the VM Observe found; suspending, then powering off again, takes
	// an Update and an Observe per step.
	m.Spec.PowerState = banlieuev1.PowerStateSuspended
	if o := converge(t, s, m); o.PowerState != banlieuev1.PowerStateSuspended {
		t.Fatalf("power state %s, want Suspended", o.PowerState)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("reconciling a power change listed the cluster %d times, want 0", n)
	}

	// A machine whose status was lost (spec.providerID is no location) is found by
	// listing once; once the details Observe reports are recorded, the next Observe
	// reads the VM where they say.
	unstructured.RemoveNestedField(m.Object.Object, "status", "proxmox")
	s = connect(t, sim, newDriver(sim))
	o, err = s.Observe(ctx, m)
	if err != nil || !o.Exists {
		t.Fatalf("Observe without status.proxmox = %+v, %v; want the VM", o, err)
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("Observe without status.proxmox listed the cluster %d times, want 1", n)
	}
	record(t, m, o)
	if o, err := s.Observe(ctx, m); err != nil || !o.Exists {
		t.Fatalf("Observe = %+v, %v; want the VM", o, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("Observe after the details were recorded listed the cluster %d times, want 0", n)
	}

	// Delete stops the paused VM (status/current, not the listing, says it runs) and
	// destroys it; every call before the VM is gone reads it directly.
	task, err := observeDelete(t, s, m)
	if err != nil || !task.InFlight() {
		t.Fatalf("Delete of the paused VM = %+v, %v; want the stop task", task, err)
	}
	if _, err := settle(t, s, m, task); err != nil {
		t.Fatal(err)
	}
	if got := theVM(t, sim); got.Status != "stopped" {
		t.Fatalf("VM is %s after the stop task, want stopped", got.Status)
	}
	if task, err = observeDelete(t, s, m); err != nil || !task.InFlight() {
		t.Fatalf("Delete of the stopped VM = %+v, %v; want the destroy task", task, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("deleting listed the cluster %d times while the VM existed, want 0", n)
	}
	// Once the VM is gone, where it was tells nothing: it might have moved, so the
	// cluster is listed to be sure it is gone.
	if o, err := settle(t, s, m, task); err != nil || o.Exists {
		t.Fatalf("Observe after the destroy task = %+v, %v; want no VM", o, err)
	}
	noVMs(t, sim)
	// Each Observe while the task was still reported listed once; how many there were
	// is the simulator's timing. One Observe of the gone VM lists exactly once.
	lists.since(t)
	if o, err := s.Observe(ctx, m); err != nil || o.Exists {
		t.Fatalf("Observe of the gone VM = %+v, %v; want no VM", o, err)
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("finding the VM gone listed the cluster %d times, want 1", n)
	}
}

// A VM that is not where the machine last saw it (moved to another node, as a
// migration or HA recovery moves it; its VMID taken by another VM; destroyed behind
// the provider's back) is looked for in the cluster's listing. The simulator does not
// migrate VMs, so the machine's record is moved instead: for the driver it is the same,
// the VM's config is not on the recorded node.
func TestStaleLocationFallsBackToTheListing(t *testing.T) {
	ctx := context.Background()

	t.Run("a VM on another node is found, observed, updated and deleted", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		m := newMachine("b2c3d4e5-0000-4000-8000-00000000000b")
		converge(t, connect(t, sim, newDriver(sim)), m)
		vm := theVM(t, sim)
		stale := infrav1.ProxmoxStatus{Node: proxmoxtest.Node2, VMID: int32(vm.VMID)}
		setStatusBlock(t, m, stale)

		s := connect(t, sim, newDriver(sim))
		lists := countCalls(sim, listOp)
		o, err := s.Observe(ctx, m)
		if err != nil || !o.Exists || o.FailureDomain != proxmoxtest.Node1 {
			t.Fatalf("Observe = %+v, %v; want the VM on pve1", o, err)
		}
		if d := o.Details.(*infrav1.ProxmoxStatus); d.Node != proxmoxtest.Node1 || int(d.VMID) != vm.VMID {
			t.Errorf("details %+v, want pve1/%d", d, vm.VMID)
		}
		if n := lists.since(t); n != 1 {
			t.Errorf("Observe listed the cluster %d times, want 1", n)
		}
		record(t, m, o) // as the reconciler writes them, after the Update that follows

		// Update acts on the VM of the Observation it is handed, which Observe found in
		// the listing: it neither follows the stale record nor looks again.
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		res, err := s.Update(ctx, m, o)
		if err != nil || !res.Task.InFlight() {
			t.Fatalf("Update with the Observation of the stale record = %+v, %v; want the shutdown task", res, err)
		}
		if n := lists.since(t); n != 0 {
			t.Errorf("Update listed the cluster %d times, want 0", n)
		}
		if _, err := settle(t, s, m, res.Task); err != nil {
			t.Fatal(err)
		}

		// Once the details Observe reported are recorded, the VM is read there.
		if n := lists.since(t); n != 0 {
			t.Errorf("observing the shutdown listed the cluster %d times, want 0", n)
		}

		// A new session deleting by the stale record deletes the VM: no orphan.
		setStatusBlock(t, m, stale)
		deleteAll(t, connect(t, sim, newDriver(sim)), m)
		noVMs(t, sim)
		if o, err := connect(t, sim, newDriver(sim)).Observe(ctx, m); err != nil || o.Exists {
			t.Errorf("Observe after Delete = %+v, %v; want no VM", o, err)
		}
	})

	t.Run("a VMID taken by another machine's VM leads to the machine's own", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		mine, other := newMachine("c3d4e5f6-0000-4000-8000-00000000000c"), newMachine("d4e5f607-0000-4000-8000-00000000000d")
		converge(t, s, mine)
		converge(t, s, other)
		setStatusBlock(t, mine, statusOf(t, other))

		o, err := connect(t, sim, newDriver(sim)).Observe(ctx, mine)
		if err != nil || !o.Exists {
			t.Fatalf("Observe = %+v, %v; want the machine's VM", o, err)
		}
		if got, want := o.Details.(*infrav1.ProxmoxStatus).VMID, statusOf(t, other).VMID; got == want {
			t.Errorf("Observe reports the other machine's VM %d", got)
		}
	})

	t.Run("a VM at the recorded place with the machine's tag but another UID is an IdentityMismatch", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		mine, other := newMachine("e5f60718-0000-4000-8000-00000000000e"), newMachine("f6071829-0000-4000-8000-00000000000f")
		converge(t, s, other)
		loc := statusOf(t, other)
		tags := TagPrefix + string(other.UID) + ";" + TagPrefix + string(mine.UID)
		if err := s.api.SetConfig(ctx, loc.Node, int(loc.VMID), pve.ConfigChange{Set: map[string]any{"tags": tags}}); err != nil {
			t.Fatal(err)
		}
		setStatusBlock(t, mine, loc)
		_, err := connect(t, sim, newDriver(sim)).Observe(ctx, mine)
		var perm *providersdk.PermanentError
		if !errors.As(err, &perm) || perm.Reason != infrav1.MachineIdentityMismatchReason {
			t.Fatalf("Observe = %v; want an IdentityMismatch", err)
		}
	})

	t.Run("a VM destroyed behind the provider's back is gone, and Delete is done", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		m := newMachine("0718293a-0000-4000-8000-000000000010")
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		converge(t, s, m)
		loc := statusOf(t, m)
		if _, err := s.api.Delete(ctx, loc.Node, int(loc.VMID), pve.DeleteOptions{Purge: true}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, ok := sim.VM(int(loc.VMID)); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("VM %d not destroyed", loc.VMID)
			}
		}
		s = connect(t, sim, newDriver(sim))
		o, err := s.Observe(ctx, m)
		if err != nil || o.Exists {
			t.Fatalf("Observe = %+v, %v; want no VM", o, err)
		}
		if res, err := s.Delete(ctx, m, o); err != nil || res.Task.InFlight() {
			t.Fatalf("Delete = %+v, %v; want done", res, err)
		}
	})

	t.Run("a machine deleted with a recorded place that is gone waits for a clone in flight", func(t *testing.T) {
		sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
		})
		m := newMachine("18293a4b-0000-4000-8000-000000000011")
		clone, err := observeCreate(t, connect(t, sim, newDriver(sim)), m)
		if err != nil || !clone.InFlight() {
			t.Fatalf("Create = %+v, %v", clone, err)
		}
		// The provider dies before it records the clone; the machine names a VMID that
		// is not (yet) there, and is deleted.
		setStatusBlock(t, m, infrav1.ProxmoxStatus{Node: proxmoxtest.Node1, VMID: 4242})
		now := metav1.Now()
		m.Object.SetDeletionTimestamp(&now)
		o, task, err := observeThen(t, connect(t, sim, newDriver(sim)), m, providersdk.OperationDelete)
		if err != nil || !o.Exists || task.Ref != clone.Ref {
			t.Fatalf("Observe mid-clone = %+v, task %+v, %v; want to wait for clone %s", o, task, err, clone.Ref)
		}
	})

	t.Run("a VM named by the old scheme, its place unrecorded, is found by its tag", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		m := newMachine("293a4b5c-0000-4000-8000-000000000012")
		converge(t, s, m)
		loc := statusOf(t, m)
		// VMs made before names carried a hash are named "<namespace>-<name>".
		if err := s.api.SetConfig(ctx, loc.Node, int(loc.VMID), pve.ConfigChange{Set: map[string]any{"name": m.Namespace + "-" + m.Name}}); err != nil {
			t.Fatal(err)
		}
		setStatusBlock(t, m, infrav1.ProxmoxStatus{})
		o, err := connect(t, sim, newDriver(sim)).Observe(ctx, m)
		if err != nil || !o.Exists || !o.UpToDate || o.Details.(*infrav1.ProxmoxStatus).VMID != loc.VMID {
			t.Fatalf("Observe = %+v, %v; want VM %d, up to date", o, err, loc.VMID)
		}
	})
}

// Where a machine's VM is lives in its status.proxmox alone, which Observe's and
// Create's details fill: spec.providerID and the failure domain are no location.
func TestRecordedLocationIsTheStatusBlock(t *testing.T) {
	tests := []struct {
		name   string
		status *infrav1.ProxmoxStatus
		want   location
	}{
		{name: "a machine with status.proxmox is where it says", status: &infrav1.ProxmoxStatus{Node: proxmoxtest.Node2, VMID: 123},
			want: location{node: proxmoxtest.Node2, vmid: 123}},
		{name: "a machine with a provider ID but no status.proxmox has no location"},
		{name: "a status.proxmox without a VMID is no location", status: &infrav1.ProxmoxStatus{Node: proxmoxtest.Node1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine("293a4b5c-0000-4000-8000-000000000012")
			m.Spec.ProviderID = "proxmox://" + proxmoxtest.Cluster + "/123"
			if tt.status != nil {
				setStatusBlock(t, m, *tt.status)
			}
			got := recordedLocation(m)
			if got.known() != tt.want.known() || (got.known() && got != tt.want) {
				t.Errorf("recordedLocation = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// statusOf reads the machine's status.proxmox.
func statusOf(t *testing.T, m *providersdk.Machine) infrav1.ProxmoxStatus {
	t.Helper()
	var st infrav1.ProxmoxStatus
	if err := m.StatusField("proxmox", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// New machines share a listing: a session past its grace looks for the VM of a machine
// no session of its process cloned for in the latest listing up to listingReuse old.
// A machine its process cloned for, a guest of the listing that may be the machine's,
// and a session still in its grace each list the cluster anew.
func TestNewMachinesShareARecentListing(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	observe := func(s *session, m *providersdk.Machine) providersdk.Observation {
		t.Helper()
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatalf("Observe %s: %v", m.Name, err)
		}
		return o
	}

	// A previous provider process made machine a's VM and recorded nothing.
	a := newMachine("c1d2e3f4-0000-4000-8000-0000000000a1")
	earlier := connect(t, sim, newDriver(sim))
	converge(t, earlier, a)
	unstructured.RemoveNestedField(a.Object.Object, "status", "proxmox")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		all, err := earlier.api.Resources(ctx)
		if err == nil && !slices.ContainsFunc(all, unreported) {
			break // the listing names a's VM: only its name can point a lookup to it
		} else if time.Now().After(deadline) {
			t.Fatalf("the listing does not name a's VM yet: %+v, %v", all, err)
		}
	}

	d := newDriver(sim)
	s := connect(t, sim, d)
	lists := countCalls(sim, listOp)
	b, c := newMachine("d2e3f4a5-0000-4000-8000-0000000000b2"), newMachine("e3f4a5b6-0000-4000-8000-0000000000c3")
	for _, m := range []*providersdk.Machine{b, c} {
		if o := observe(s, m); o.Exists {
			t.Fatalf("Observe %s = %+v, want no VM", m.Name, o)
		}
	}
	if n := lists.since(t); n != 2 {
		t.Errorf("a session in its grace listed %d times for two new machines, want 2", n)
	}

	s.reuseFrom = time.Now() // the grace is over
	for _, m := range []*providersdk.Machine{b, c, b} {
		if o := observe(s, m); o.Exists {
			t.Fatalf("Observe %s = %+v, want no VM", m.Name, o)
		}
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("three looks for new machines listed %d times, want 1", n)
	}

	// a's VM is in the shared listing: it is confirmed in one made now.
	if o := observe(s, a); !o.Exists {
		t.Fatalf("Observe of the machine an earlier process cloned for = %+v, want its VM", o)
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("finding a's VM listed %d times, want 1", n)
	}

	// Once a session of the process asked PVE to clone for b, no lookup of b's VM takes
	// a listing that may be older than the clone, in any session of the process: here
	// one that replaced s and read its listing just before s cloned.
	other := connect(t, sim, d)
	other.reuseFrom = time.Now()
	observe(other, c)
	task, err := observeCreate(t, s, b)
	if err != nil || !task.InFlight() {
		t.Fatalf("Create = %+v, %v; want the clone", task, err)
	}
	lists.since(t)
	unstructured.RemoveNestedField(b.Object.Object, "status", "proxmox")
	for _, look := range []*session{s, other} {
		if o := observe(look, b); !o.Exists {
			t.Fatalf("Observe of b after its clone = %+v, want its VM or its clone", o)
		}
	}
	if n := lists.since(t); n != 2 {
		t.Errorf("two looks for b's VM after its clone listed %d times, want 2, each made then", n)
	}
	if got := vmsOf(sim, c); len(got) != 0 {
		t.Errorf("c's VMs: %v, want none", got)
	}
}

// A machine being deleted whose VM this session saw destroyed is found gone without a
// listing: the destroy task that ended well says the VM left the place recorded, not
// that it moved. A session that did not see the destroy, and a machine not being
// deleted, look for the VM in a listing.
func TestADestroyedVMIsGoneWithoutAListing(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim))
	m := newMachine("f4a5b6c7-0000-4000-8000-0000000000d4")
	converge(t, s, m)
	m.Object.SetDeletionTimestamp(ptr.To(metav1.Now()))
	lists := countCalls(sim, listOp)
	deleteAll(t, s, m)
	noVMs(t, sim)
	if o, err := s.Observe(ctx, m); err != nil || o.Exists {
		t.Fatalf("Observe of the destroyed VM = %+v, %v; want none", o, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("deleting the machine listed the cluster %d times, want 0", n)
	}

	if o, err := connect(t, sim, newDriver(sim)).Observe(ctx, m); err != nil || o.Exists {
		t.Fatalf("another session's Observe = %+v, %v; want no VM", o, err)
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("a session that did not see the destroy listed %d times, want 1", n)
	}
	m.Object.SetDeletionTimestamp(nil)
	if o, err := s.Observe(ctx, m); err != nil || o.Exists {
		t.Fatalf("Observe of the machine no longer being deleted = %+v, %v; want no VM", o, err)
	}
	if n := lists.since(t); n != 1 {
		t.Errorf("a machine not being deleted listed %d times, want 1: its Create needs the listing", n)
	}
}
