package proxmox

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
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

// deleteAll calls Delete and settles its tasks until it starts none, failing the test on
// an error.
func deleteAll(t *testing.T, s *session, m *providersdk.Machine) {
	t.Helper()
	for range 10 {
		res, err := s.Delete(context.Background(), m, providersdk.Observation{})
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if !res.Task.InFlight() {
			return
		}
		if _, err := settle(t, s, m, res.Task); err != nil {
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

// A machine that knows where its VM is is reconciled without listing the cluster: its
// VM's config is read where status.proxmox (or spec.providerID) says, by a new session
// that has never seen the machine, through Observe, Update and Delete.
func TestRecordedLocationIsReadWithoutListing(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	m := newMachine("a1b2c3d4-0000-4000-8000-00000000000a")
	converge(t, connect(t, sim, newDriver(sim)), m)
	vm := theVM(t, sim)
	if got := statusBlock(m); got != (infrav1.ProxmoxStatus{Node: proxmoxtest.Node1, VMID: int32(vm.VMID)}) {
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

	// Update reads the VM where Observe found it; suspending, then powering off again,
	// takes an Update and an Observe per step.
	m.Spec.PowerState = banlieuev1.PowerStateSuspended
	if o := converge(t, s, m); o.PowerState != banlieuev1.PowerStateSuspended {
		t.Fatalf("power state %s, want Suspended", o.PowerState)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("reconciling a power change listed the cluster %d times, want 0", n)
	}

	// Only spec.providerID and the failure domain: a machine whose status was lost.
	unstructured.RemoveNestedField(m.Object.Object, "status", "proxmox")
	if got := statusBlock(m); got.VMID != 0 {
		t.Fatalf("status.proxmox still there: %+v", got)
	}
	s = connect(t, sim, newDriver(sim))
	if o, err := s.Observe(ctx, m); err != nil || !o.Exists {
		t.Fatalf("Observe by spec.providerID = %+v, %v; want the VM", o, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("Observe by spec.providerID listed the cluster %d times, want 0", n)
	}

	// Delete stops the paused VM (status/current, not the listing, says it runs) and
	// destroys it; every call before the VM is gone reads it directly.
	res, err := s.Delete(ctx, m, providersdk.Observation{})
	if err != nil || !res.Task.InFlight() {
		t.Fatalf("Delete of the paused VM = %+v, %v; want the stop task", res, err)
	}
	if _, err := settle(t, s, m, res.Task); err != nil {
		t.Fatal(err)
	}
	if got := theVM(t, sim); got.Status != "stopped" {
		t.Fatalf("VM is %s after the stop task, want stopped", got.Status)
	}
	if res, err = s.Delete(ctx, m, providersdk.Observation{}); err != nil || !res.Task.InFlight() {
		t.Fatalf("Delete of the stopped VM = %+v, %v; want the destroy task", res, err)
	}
	if n := lists.since(t); n != 0 {
		t.Errorf("deleting listed the cluster %d times while the VM existed, want 0", n)
	}
	// Once the VM is gone, where it was tells nothing: it might have moved, so the
	// cluster is listed to be sure it is gone.
	if o, err := settle(t, s, m, res.Task); err != nil || o.Exists {
		t.Fatalf("Observe after the destroy task = %+v, %v; want no VM", o, err)
	}
	noVMs(t, sim)
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
		setStatusBlock(t, m, infrav1.ProxmoxStatus{Node: proxmoxtest.Node2, VMID: int32(vm.VMID)})

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
		// The session now knows where the VM is, even before the status is written.
		if _, err := s.Observe(ctx, m); err != nil {
			t.Fatal(err)
		}
		if n := lists.since(t); n != 0 {
			t.Errorf("the next Observe listed the cluster %d times, want 0", n)
		}

		// Update given an Observation that is out of date looks again.
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		stale := providersdk.Observation{Exists: true, Details: &infrav1.ProxmoxStatus{Node: proxmoxtest.Node2, VMID: int32(vm.VMID)}}
		res, err := connect(t, sim, newDriver(sim)).Update(ctx, m, stale)
		if err != nil || !res.Task.InFlight() {
			t.Fatalf("Update with a stale Observation = %+v, %v; want the shutdown task", res, err)
		}
		if _, err := settle(t, s, m, res.Task); err != nil {
			t.Fatal(err)
		}

		// A new session deleting by the stale record deletes the VM: no orphan.
		setStatusBlock(t, m, infrav1.ProxmoxStatus{Node: proxmoxtest.Node2, VMID: int32(vm.VMID)})
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
		setStatusBlock(t, mine, statusBlock(other))

		o, err := connect(t, sim, newDriver(sim)).Observe(ctx, mine)
		if err != nil || !o.Exists {
			t.Fatalf("Observe = %+v, %v; want the machine's VM", o, err)
		}
		if got, want := o.Details.(*infrav1.ProxmoxStatus).VMID, statusBlock(other).VMID; got == want {
			t.Errorf("Observe reports the other machine's VM %d", got)
		}
	})

	t.Run("a VM at the recorded place with the machine's tag but another UID is an IdentityMismatch", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		mine, other := newMachine("e5f60718-0000-4000-8000-00000000000e"), newMachine("f6071829-0000-4000-8000-00000000000f")
		converge(t, s, other)
		loc := statusBlock(other)
		tags := TagPrefix + string(other.UID) + ";" + TagPrefix + string(mine.UID)
		if err := s.put(ctx, vmPath(loc.Node, int(loc.VMID), "config"), map[string]any{"tags": tags}, nil); err != nil {
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
		loc := statusBlock(m)
		var upid string
		if err := s.del(ctx, vmPath(loc.Node, int(loc.VMID)), map[string]string{"purge": "1"}, &upid); err != nil {
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
		if o, err := s.Observe(ctx, m); err != nil || o.Exists {
			t.Fatalf("Observe = %+v, %v; want no VM", o, err)
		}
		if res, err := s.Delete(ctx, m, providersdk.Observation{}); err != nil || res.Task.InFlight() {
			t.Fatalf("Delete = %+v, %v; want done", res, err)
		}
	})

	t.Run("Delete with a recorded place that is gone waits for a clone in flight", func(t *testing.T) {
		sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.TaskDelays = map[string]time.Duration{"qmclone": 500 * time.Millisecond}
		})
		m := newMachine("18293a4b-0000-4000-8000-000000000011")
		res, err := connect(t, sim, newDriver(sim)).Create(ctx, m, providersdk.Observation{})
		if err != nil || !res.Task.InFlight() {
			t.Fatalf("Create = %+v, %v", res, err)
		}
		// The provider dies before it records the clone; the machine names a VMID that
		// is not (yet) there.
		setStatusBlock(t, m, infrav1.ProxmoxStatus{Node: proxmoxtest.Node1, VMID: 4242})
		_, err = connect(t, sim, newDriver(sim)).Delete(ctx, m, providersdk.Observation{})
		var inFlight *providersdk.InFlightError
		if !errors.As(err, &inFlight) || inFlight.Task.Ref != res.Task.Ref {
			t.Fatalf("Delete mid-clone = %v; want to wait for clone %s", err, res.Task.Ref)
		}
	})

	t.Run("a provider ID of another cluster is not followed", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, newDriver(sim))
		m := newMachine("293a4b5c-0000-4000-8000-000000000012")
		m.Spec.ProviderID = "proxmox://elsewhere/" + strconv.Itoa(proxmoxtest.TemplateVMID)
		if loc := s.lastLocation(m, nil); loc.known() {
			t.Errorf("lastLocation = %+v, want none", loc)
		}
		m.Spec.ProviderID = "proxmox://" + proxmoxtest.Cluster + "/123"
		if loc := s.lastLocation(m, nil); loc != (location{node: proxmoxtest.Node1, vmid: 123}) {
			t.Errorf("lastLocation = %+v, want pve1/123", loc)
		}
	})
}
