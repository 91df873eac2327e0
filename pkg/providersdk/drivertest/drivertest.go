package drivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Backend is what a driver's conformance test gives the kit: the driver, Providers on
// its backend (the simulator or daemon the test started), machines it can make VMs
// for, and ways to look at the backend from outside the driver, so that the kit
// never takes the driver's word for what the backend holds.
type Backend struct {
	// Driver is the driver under test.
	Driver providersdk.Driver
	// Provider connects to the backend with valid credentials.
	Provider providersdk.ProviderInfo
	// Unreachable names an endpoint where nothing answers (a closed loopback port).
	Unreachable providersdk.ProviderInfo
	// Unauthorized carries credentials the backend refuses; nil for a backend that
	// takes none (libvirt on a local socket), whose Case says so.
	Unauthorized *providersdk.ProviderInfo
	// NewMachine returns a machine, with a fresh UID, name and namespace, that the
	// backend can make a VM for.
	NewMachine func(t *testing.T) *providersdk.Machine
	// MissingImage changes a machine so that its image does not exist on the backend.
	MissingImage func(m *providersdk.Machine)
	// Count returns how many backend VMs carry the machine's identity, read with the
	// backend's own API, not the driver's.
	Count func(t *testing.T, m *providersdk.Machine) int
	// Snapshot describes the backend's whole state (VMs, their configuration and power,
	// volumes, tasks), so that any change to the backend changes the description.
	Snapshot func(t *testing.T) string
	// Impostor makes, with the backend's own API, a VM that looks like the machine's by
	// one of the keys the driver finds VMs by (its name, its UUID, its tag) but belongs
	// to someone else; it returns a check that the impostor is still there, unchanged.
	Impostor func(t *testing.T, m *providersdk.Machine) (intact func() bool)
	// Released checks, with the backend's own API, a VM the driver's Releaser let go:
	// before is what Observe reported of it just before. It returns an error when the VM
	// is gone, or is no longer in before.PowerState, or has lost a disk or volume, or
	// still carries one of the machine's marks; and it removes the VM when the test
	// ends, since no machine will any more. Nil, or a driver whose Client is no
	// providersdk.Releaser, skips the Release check.
	Released func(t *testing.T, m *providersdk.Machine, before providersdk.Observation) error
	// Disks returns how many disks the machine's VM has, read with the backend's own
	// API; nil skips the check that a disk added across a crash is added once.
	Disks func(t *testing.T, m *providersdk.Machine) int
	// Timeout bounds each wait for the backend; a minute when zero.
	Timeout time.Duration
}

// Run checks the behaviours every driver must show against its backend, each as a
// subtest: create is idempotent; a create after a crash mid-create adopts what the
// first one made; delete of a missing VM succeeds and leaves nothing; observe never
// changes the backend; a VM of another identity is never touched; the typed errors:
// unreachable, unauthorized, permanent, in flight; a session makes no call once
// closed, and says so with providersdk.ErrSessionClosed; the boot ID changes on a power
// cycle only; a resize the VM cannot take while it runs waits for its power cycle,
// which makes it across crashes; a disk added across a crash is added once; a marked
// VM names its machine and cluster and goes as an orphan; and, for
// a Releaser, that Release leaves the VM as it was, without the
// machine's marks, also across a restart.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Timeout == 0 {
		b.Timeout = time.Minute
	}
	t.Run("create is idempotent", b.createIsIdempotent)
	t.Run("create after a crash mid-create adopts the VM", b.crashMidCreateAdopts)
	t.Run("delete of a missing VM succeeds", b.deleteOfMissingSucceeds)
	t.Run("observe never changes the backend", b.observeChangesNothing)
	t.Run("a VM of another identity is never touched", b.impostorIsLeftAlone)
	t.Run("an unreachable backend is an Unreachable error", b.unreachableIsTyped)
	t.Run("rejected credentials are an Unauthorized error", b.unauthorizedIsTyped)
	t.Run("a closed session makes nothing and says it is closed", b.closedSessionMakesNothing)
	t.Run("a missing image is a Permanent error", b.missingImageIsPermanent)
	t.Run("a task in flight is reported, and the VM exists meanwhile", b.taskInFlightIsReported)
	t.Run("release leaves the VM running and unmarked, also across a crash", b.releaseLeavesTheVM)
	t.Run("the boot ID changes on a power cycle, not on an observe", b.bootIDChangesOnAPowerCycle)
	t.Run("a resize of a running VM waits for its power cycle, which makes it across crashes", b.resizeWaitsForThePowerCycle)
	t.Run("a disk added across a crash is added once", b.diskAddedOnceAcrossACrash)
	t.Run("a marked VM names its machine and cluster, and goes as an orphan", b.orphanIsDeletedFromItsMark)
}

// diskAddedOnceAcrossACrash adds a disk (a copy of the first one's class and target,
// 1 GiB) to a powered-off VM, with the provider killed after its first Update (the
// task it started never recorded, its session gone); its successor converges the
// machine. The backend's own count of the VM's disks must have grown by one.
func (b *Backend) diskAddedOnceAcrossACrash(t *testing.T) {
	if b.Disks == nil {
		t.Skip("the test gives no Disks check")
	}
	m := b.NewMachine(t)
	if len(m.Spec.Disks) == 0 {
		t.Skip("the backend's machines have no disk to copy")
	}
	t.Cleanup(func() { b.remove(t, b.connect(t), m) })
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	b.converge(t, b.connect(t), m)
	before := b.Disks(t, m)

	extra := *m.Spec.Disks[0].DeepCopy()
	extra.Name, extra.SizeGiB = "extra", 1
	m.Spec.Disks = append(m.Spec.Disks, extra)
	dying := b.connect(t)
	obs := b.observe(t, dying, m)
	if obs.UpToDate {
		t.Fatal("a VM without the spec's new disk is reported up to date")
	}
	if _, err := dying.Update(b.ctx(t), m, obs); err != nil && !providersdk.IsInFlight(err) {
		t.Fatalf("Update: %v", err)
	}
	m.Task = providersdk.Task{}
	b.converge(t, b.connect(t), m)
	n := b.Disks(t, m)
	if n != before+1 {
		t.Errorf("the VM has %d disks after one was added across a crash, want %d", n, before+1)
	}
	t.Logf("the backend counts %d disks before, %d after", before, n)
}

// resizeWaitsForThePowerCycle checks a change a driver cannot make while the VM runs:
// one CPU less, which no backend removes online. Observe reports it in PendingRestart
// and the VM up to date, and Update leaves the backend as it was. Then the power cycle a
// restart is, with the provider killed after the first step of each half (the task it
// started never recorded, its session gone): the VM takes the change, and once it runs
// again nothing is pending and it is still one VM.
func (b *Backend) resizeWaitsForThePowerCycle(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, b.connect(t), m) })
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
	m.Spec.Hardware.CPUs = max(m.Spec.Hardware.CPUs, 2)
	b.converge(t, cl, m)

	m.Spec.Hardware.CPUs--
	before := b.Snapshot(t)
	obs := b.observe(t, cl, m)
	if !obs.UpToDate || len(obs.PendingRestart) == 0 {
		t.Fatalf("a running VM with one CPU too many: up to date %v, pending %q; want up to date with the change pending", obs.UpToDate, obs.PendingRestart)
	}
	if res, err := cl.Update(b.ctx(t), m, obs); err != nil || res.Task.InFlight() {
		t.Fatalf("Update of a running VM whose change waits = %+v, %v; want nothing done", res, err)
	}
	if after := b.Snapshot(t); after != before {
		t.Errorf("Update changed a running VM whose change waits for its power cycle:\nbefore: %s\nafter:  %s", before, after)
	}

	for _, power := range []banlieuev1.PowerState{banlieuev1.PowerStatePoweredOff, banlieuev1.PowerStatePoweredOn} {
		m.Spec.PowerState = power
		dying := b.connect(t)
		if obs := b.observe(t, dying, m); !obs.UpToDate {
			if _, err := dying.Update(b.ctx(t), m, obs); err != nil && !providersdk.IsInFlight(err) {
				t.Fatalf("Update to %s: %v", power, err)
			}
		}
		m.Task = providersdk.Task{}
		b.converge(t, b.connect(t), m)
	}
	if obs := b.observe(t, cl, m); !obs.UpToDate || len(obs.PendingRestart) > 0 {
		t.Errorf("after the power cycle: up to date %v, pending %q; want the change made", obs.UpToDate, obs.PendingRestart)
	}
	if n := b.Count(t, m); n != 1 {
		t.Errorf("the backend holds %d VMs of the machine after a resize across crashes, want 1", n)
	}
}

func (b *Backend) releaseLeavesTheVM(t *testing.T) {
	cl := b.connect(t)
	rel, ok := cl.(providersdk.Releaser)
	if !ok || b.Released == nil {
		t.Skip("the driver is no Releaser, or the test gives no Released check")
	}
	m := b.NewMachine(t)
	b.converge(t, cl, m)
	before := b.observe(t, cl, m)
	m.Deleting, m.Spec.DeletionPolicy = true, banlieuev1.DeletionPolicyRetain
	if after := b.observe(t, cl, m); !after.Exists {
		t.Fatalf("a marked VM of a machine deleted under Retain is not reported: %+v", after)
	}
	// What the SDK's Reconciler does for a machine deleted under Retain, until Observe
	// no longer reports the VM; Release is called once more with the VM still marked
	// when the first one started a task, as a provider restarted meanwhile would.
	err := b.untilGone(t, cl, m, func(ctx context.Context, obs providersdk.Observation) (providersdk.Task, error) {
		res, err := rel.Release(ctx, m, obs)
		return res.Task, err
	})
	if err != nil {
		t.Fatalf("the VM was not released: %v", err)
	}
	// The process dies before it removes the finalizer: its successor, with a new
	// session and no task recorded, finds the VM released, and releases nothing again.
	m.Task = providersdk.Task{}
	if obs := b.observe(t, b.connect(t), m); obs.Exists || obs.Task.InFlight() {
		t.Errorf("a released VM is reported again after a restart: %+v", obs)
	}
	if err := b.Released(t, m, before); err != nil {
		t.Errorf("the released VM: %v", err)
	}
}

// orphanIsDeletedFromItsMark checks, for an OrphanLister, that ListMarked reports the
// machine's VM once, with the machine's UID, its cluster and, when the mark names it,
// its namespace and name; and that once the machine is gone its VM is deleted from the
// mark alone, as spec.orphanPolicy Delete does (providersdk.DeleteOrphan, once per scan).
func (b *Backend) orphanIsDeletedFromItsMark(t *testing.T) {
	cl := b.connect(t)
	lister, ok := cl.(providersdk.OrphanLister)
	if !ok {
		t.Skip("the driver is no OrphanLister")
	}
	m := b.NewMachine(t)
	m.ClusterID = "cluster-of-" + string(m.UID)
	t.Cleanup(func() { b.remove(t, cl, m) })
	b.converge(t, cl, m)
	marked, err := lister.ListMarked(b.ctx(t))
	if err != nil {
		t.Fatalf("ListMarked: %v", err)
	}
	var found []providersdk.MarkedVM
	for _, vm := range marked {
		if vm.MachineUID == m.UID {
			found = append(found, vm)
		}
	}
	if len(found) != 1 {
		t.Fatalf("ListMarked reports the machine's VM %d times, want once: %+v", len(found), found)
	}
	vm := found[0]
	if vm.ClusterID != m.ClusterID {
		t.Errorf("the mark names cluster %q, want the machine's %q", vm.ClusterID, m.ClusterID)
	}
	if vm.Adopted {
		t.Error("a VM the driver created is reported as adopted, which would keep it from orphanPolicy Delete")
	}
	if vm.Machine.Name != "" && (vm.Machine.Namespace != m.Namespace || vm.Machine.Name != m.Name) {
		t.Errorf("the mark names machine %s, want %s/%s", vm.Machine, m.Namespace, m.Name)
	}
	if err := b.loop(t, m, func(ctx context.Context) (bool, error) {
		return providersdk.DeleteOrphan(ctx, cl, m.Spec.ProviderRef, vm)
	}); err != nil {
		t.Fatalf("the orphan was not deleted: %v", err)
	}
	if n := b.Count(t, m); n != 0 {
		t.Errorf("%d VMs carry the machine's identity once its orphan was deleted, want none", n)
	}
}

// bootIDChangesOnAPowerCycle checks Observation.BootID, which the SDK counts restarts
// by: non-empty while the VM runs, the same from one Observe to the next, and another
// after the VM was powered off and on (through Update, with the backend's shutdown
// timeout as the driver was given it).
func (b *Backend) bootIDChangesOnAPowerCycle(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, cl, m) })
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
	b.converge(t, cl, m)
	first := b.observe(t, cl, m).BootID
	if first == "" {
		t.Fatal("a running VM reports no boot ID")
	}
	if again := b.observe(t, cl, m).BootID; again != first {
		t.Errorf("the boot ID changed from %q to %q between two Observes of a running VM", first, again)
	}
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	b.converge(t, cl, m)
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
	b.converge(t, cl, m)
	switch second := b.observe(t, cl, m).BootID; second {
	case "":
		t.Error("the VM reports no boot ID after it was powered on again")
	case first:
		t.Errorf("the boot ID %q did not change across a power cycle", first)
	}
}

func (b *Backend) createIsIdempotent(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, cl, m) })
	b.converge(t, cl, m)
	// The SDK never calls Create for a VM that exists; a driver still must not make a
	// second one when it is called so.
	obs := b.observe(t, cl, m)
	if _, err := cl.Create(b.ctx(t), m, obs); err != nil && !providersdk.IsInFlight(err) {
		t.Fatalf("Create of an existing VM failed: %v", err)
	}
	b.converge(t, cl, m)
	if n := b.Count(t, m); n != 1 {
		t.Errorf("the backend holds %d VMs of the machine after two creates, want 1", n)
	}
}

func (b *Backend) crashMidCreateAdopts(t *testing.T) {
	first := b.connect(t)
	m := b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, b.connect(t), m) })
	obs := b.observe(t, first, m)
	if _, err := first.Create(b.ctx(t), m, obs); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// The process dies here: whatever task Create started is never recorded, and its
	// session is gone. A successor starts from the machine as stored.
	m.Task = providersdk.Task{}
	b.converge(t, b.connect(t), m)
	if n := b.Count(t, m); n != 1 {
		t.Errorf("the backend holds %d VMs of the machine after a crash mid-create, want 1", n)
	}
}

func (b *Backend) deleteOfMissingSucceeds(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	obs := b.observe(t, cl, m)
	if obs.Exists {
		t.Fatalf("a new machine's VM exists: %+v", obs)
	}
	if _, err := cl.Delete(b.ctx(t), m, obs); err != nil {
		t.Errorf("Delete of a VM that never existed failed: %v", err)
	}
	b.converge(t, cl, m)
	b.remove(t, cl, m)
	// Gone: Delete is called once more, as a provider that restarted mid-delete would.
	if _, err := cl.Delete(b.ctx(t), m, b.observe(t, cl, m)); err != nil {
		t.Errorf("Delete of a VM already deleted failed: %v", err)
	}
	if n := b.Count(t, m); n != 0 {
		t.Errorf("the backend holds %d VMs of the deleted machine, want 0", n)
	}
}

func (b *Backend) observeChangesNothing(t *testing.T) {
	cl := b.connect(t)
	present, absent := b.NewMachine(t), b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, cl, present) })
	b.converge(t, cl, present)
	before := b.Snapshot(t)
	for range 3 {
		b.observe(t, cl, present)
		b.observe(t, cl, absent)
	}
	if after := b.Snapshot(t); after != before {
		t.Errorf("Observe changed the backend:\nbefore: %s\nafter:  %s", before, after)
	}
}

func (b *Backend) impostorIsLeftAlone(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	intact := b.Impostor(t, m)
	err := b.tryConverge(t, cl, m)
	if !providersdk.IsPermanent(err) {
		t.Errorf("making the VM beside an impostor ended with %v, want a Permanent error (a name conflict or an identity mismatch)", err)
	}
	// The machine is deleted: the impostor is still not its VM to delete.
	_ = b.tryRemove(t, cl, m)
	if !intact() {
		t.Error("the impostor VM was changed or deleted")
	}
}

func (b *Backend) unreachableIsTyped(t *testing.T) {
	cl, err := b.Driver.Connect(b.ctx(t), b.Unreachable)
	if err == nil {
		// A driver may connect lazily; its first call must then say so.
		_, err = cl.Observe(b.ctx(t), b.NewMachine(t))
	}
	if !providersdk.IsUnreachable(err) {
		t.Errorf("an unreachable backend gave %v, want an Unreachable error", err)
	}
}

func (b *Backend) unauthorizedIsTyped(t *testing.T) {
	if b.Unauthorized == nil {
		t.Log("the backend takes no credentials: nothing can be rejected")
		return
	}
	cl, err := b.Driver.Connect(b.ctx(t), *b.Unauthorized)
	if err == nil {
		_, err = cl.Observe(b.ctx(t), b.NewMachine(t))
	}
	if !providersdk.IsUnauthorized(err) {
		t.Errorf("rejected credentials gave %v, want an Unauthorized error", err)
	}
}

func (b *Backend) closedSessionMakesNothing(t *testing.T) {
	cl, err := b.Driver.Connect(b.ctx(t), b.Provider)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	m := b.NewMachine(t)
	// The session is closed with the machine's Observe done, as the Provider's session is
	// replaced under a reconcile that holds it.
	obs := b.observe(t, cl, m)
	if err := cl.Disconnect(b.ctx(t)); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	if _, err := cl.Create(b.ctx(t), m, obs); !errors.Is(err, providersdk.ErrSessionClosed) {
		t.Errorf("Create on a closed session: %v, want ErrSessionClosed", err)
	}
	if _, err := cl.Observe(b.ctx(t), m); !errors.Is(err, providersdk.ErrSessionClosed) {
		t.Errorf("Observe on a closed session: %v, want ErrSessionClosed", err)
	}
	if n := b.Count(t, m); n != 0 {
		t.Errorf("the backend holds %d VMs of a machine created on a closed session, want 0", n)
		b.remove(t, b.connect(t), m)
	}
}

func (b *Backend) missingImageIsPermanent(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	b.MissingImage(m)
	t.Cleanup(func() { _ = b.tryRemove(t, cl, m) })
	if err := b.tryConverge(t, cl, m); !providersdk.IsPermanent(err) {
		t.Errorf("a machine of a missing image ended with %v, want a Permanent error", err)
	}
	if n := b.Count(t, m); n != 0 {
		t.Errorf("the backend holds %d VMs of a machine whose image is missing, want 0", n)
	}
}

func (b *Backend) taskInFlightIsReported(t *testing.T) {
	cl := b.connect(t)
	m := b.NewMachine(t)
	t.Cleanup(func() { b.remove(t, cl, m) })
	res, err := cl.Create(b.ctx(t), m, b.observe(t, cl, m))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !res.Task.InFlight() {
		t.Log("Create is synchronous: no task to report")
		b.converge(t, cl, m)
		return
	}
	m.Task = res.Task
	obs := b.observe(t, cl, m)
	if obs.Task.InFlight() && !obs.Exists {
		t.Errorf("Observe reports task %s in flight and no VM: a machine deleted now would leave the VM the task makes", obs.Task.Ref)
	}
	if !obs.Task.InFlight() && !obs.Exists {
		t.Errorf("Observe after task %s reports neither the task nor the VM", res.Task.Ref)
	}
	b.converge(t, cl, m)
}

// connect opens a session with the valid Provider.
func (b *Backend) connect(t *testing.T) providersdk.Client {
	t.Helper()
	cl, err := b.Driver.Connect(b.ctx(t), b.Provider)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return cl
}

// ctx bounds one call.
func (b *Backend) ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// observe calls Observe and fails the test on an error.
func (b *Backend) observe(t *testing.T, cl providersdk.Client, m *providersdk.Machine) providersdk.Observation {
	t.Helper()
	obs, err := cl.Observe(b.ctx(t), m)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return obs
}

// converge drives the machine's VM to match its spec, and fails the test when it
// cannot.
func (b *Backend) converge(t *testing.T, cl providersdk.Client, m *providersdk.Machine) {
	t.Helper()
	if err := b.tryConverge(t, cl, m); err != nil {
		t.Fatalf("the VM did not converge: %v", err)
	}
}

// remove drives the machine's VM away, and fails the test when it cannot.
func (b *Backend) remove(t *testing.T, cl providersdk.Client, m *providersdk.Machine) {
	t.Helper()
	if err := b.tryRemove(t, cl, m); err != nil {
		t.Errorf("the VM was not deleted: %v", err)
	}
}

// errTimeout says the backend did not settle within Backend.Timeout.
var errTimeout = errors.New("timed out")

// tryConverge does what the SDK's Reconciler does for a machine, with the Observation
// handed on and tasks recorded as status.task records them, until the VM exists and is
// up to date. It returns the first error that is neither in flight nor a task in
// progress: a Permanent one, say.
func (b *Backend) tryConverge(t *testing.T, cl providersdk.Client, m *providersdk.Machine) error {
	t.Helper()
	return b.loop(t, m, func(ctx context.Context) (bool, error) {
		obs, err := cl.Observe(ctx, m)
		if err != nil {
			return false, err
		}
		switch {
		case obs.Task.InFlight():
			record(m, obs.Task)
			return false, nil
		case !obs.Exists:
			res, err := cl.Create(ctx, m, obs)
			record(m, res.Task)
			return false, err
		case !obs.UpToDate:
			res, err := cl.Update(ctx, m, obs)
			record(m, res.Task)
			return false, err
		}
		record(m, providersdk.Task{})
		return true, nil
	})
}

// tryRemove does what the SDK's Reconciler does for a deleted machine, until its VM is
// gone.
func (b *Backend) tryRemove(t *testing.T, cl providersdk.Client, m *providersdk.Machine) error {
	t.Helper()
	return b.untilGone(t, cl, m, func(ctx context.Context, obs providersdk.Observation) (providersdk.Task, error) {
		res, err := cl.Delete(ctx, m, obs)
		return res.Task, err
	})
}

// untilGone observes m and, while its VM is there and no task is in flight, calls act
// (a Delete or a Release) and records the task it started, until Observe no longer
// reports the VM: what the SDK's Reconciler does for a deleted machine.
func (b *Backend) untilGone(t *testing.T, cl providersdk.Client, m *providersdk.Machine,
	act func(context.Context, providersdk.Observation) (providersdk.Task, error)) error {
	t.Helper()
	return b.loop(t, m, func(ctx context.Context) (bool, error) {
		obs, err := cl.Observe(ctx, m)
		switch {
		case err != nil:
			return false, err
		case obs.Task.InFlight():
			record(m, obs.Task)
			return false, nil
		case !obs.Exists:
			record(m, providersdk.Task{})
			return true, nil
		}
		task, err := act(ctx, obs)
		record(m, task)
		return false, err
	})
}

// loop runs step until it reports done, waiting a little between steps while a task is
// in flight, and retrying the errors the SDK retries (in flight, a failed task, which
// the SDK forgets from m's status.task as it is done with it).
func (b *Backend) loop(t *testing.T, m *providersdk.Machine, step func(ctx context.Context) (bool, error)) error {
	t.Helper()
	deadline := time.Now().Add(b.Timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
		done, err := step(ctx)
		cancel()
		var failed *providersdk.TaskFailedError
		switch {
		case done:
			return nil
		case err == nil, providersdk.IsInFlight(err):
		case errors.As(err, &failed):
			t.Logf("a backend task failed and is retried, as the SDK does: %v", err)
			record(m, providersdk.Task{})
		default:
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%w after %s", errTimeout, b.Timeout)
}

// record keeps task as the machine's status.task, as the Reconciler does: the start
// time is the first time it is seen, and stays while it is the same task.
func record(m *providersdk.Machine, task providersdk.Task) {
	switch {
	case !task.InFlight():
		m.Task = providersdk.Task{}
	case task.Ref != m.Task.Ref || task.Operation != m.Task.Operation:
		task.StartedAt = time.Now()
		m.Task = task
	}
}
