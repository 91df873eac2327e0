package providersdk

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
)

// DefaultTaskRecordDelay is how long Setup's Reconciler keeps a machine's new backend
// task in memory before it writes it to the machine's status (WithTaskRecordDelay).
const DefaultTaskRecordDelay = 5 * time.Second

// unrecordedTasks keeps, per machine, the status of the reconciles whose news is a
// backend task that has run for less than delay. A task that ends sooner (a linked
// clone on a quiet vCenter, a power operation, a Proxmox VE configuration step) is
// then never written: the machine's next status write says where it ended, which
// saves a status write per step. One that runs longer is written as it turns delay
// old, so the status shows it while it runs.
//
// Each task counts from its own start, not from the first of a machine's steps: a
// provider with a long queue reaches a machine's next step late, and that wait is
// not the backend's. Counting it had the provider write a step whose task had just
// begun, and write more the more it was behind (at 10,000 VMs, 0.7 status writes
// more per Proxmox VE VM to Ready, and as many more to delete one).
//
// A process that dies loses what is kept here, as it loses a task between the backend
// call and the status write: every driver finds its VMs by identity and waits for a
// clone or a deletion it did not record (drivertest's crash-mid-create subtest and the
// fault suite's kill rounds check it), so nothing is made twice.
type unrecordedTasks struct {
	delay time.Duration

	mu    sync.Mutex
	byKey map[types.NamespacedName]unrecorded
}

// unrecorded is one machine's status kept in memory.
type unrecorded struct {
	uid     types.UID
	status  infrav1.MachineStatus
	details any
}

// restore gives s the status kept for its machine, when the stored status still has no
// task: the reconcile goes on from the task in flight, as it would from a stored one.
// The backend's references kept go into the machine's status block (block) in memory
// too, where the driver looks for them (Machine.StatusField): without them a Proxmox
// VE driver would search the whole cluster for a VM it knows the place of.
func (u *unrecordedTasks) restore(s *scope, block string) error {
	if u == nil || u.delay <= 0 {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	key, kept := u.entry(s)
	if kept == nil || s.before.Task.IsDefined() {
		delete(u.byKey, key)
		return nil
	}
	s.status = *kept.status.DeepCopy()
	t := kept.status.Task
	s.machine.Task = Task{Ref: t.Ref, Operation: t.Operation}
	if t.StartedAt != nil {
		s.machine.Task.StartedAt = t.StartedAt.Time
	}
	if kept.details == nil || block == "" || s.machine.Object == nil {
		return nil
	}
	s.details = kept.details
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kept.details)
	if err != nil {
		return fmt.Errorf("failed to convert backend status: %w", err)
	}
	// The driver reads a copy; the status write compares with the machine as stored.
	s.stored, s.machine.Object = s.machine.Object, s.machine.Object.DeepCopy()
	return unstructured.SetNestedMap(s.machine.Object.Object, fields, "status", block)
}

// hold keeps s's status in memory instead of writing it, and reports whether it did:
// when the status as stored has no task, and the one computed has one in flight that
// started less than delay ago.
func (u *unrecordedTasks) hold(s *scope, now time.Time) bool {
	if u == nil || u.delay <= 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	key, _ := u.entry(s)
	started := now
	if t := s.status.Task.StartedAt; t != nil {
		started = t.Time
	}
	if s.before.Task.IsDefined() || s.status.Task.Ref == "" || now.Sub(started) >= u.delay {
		delete(u.byKey, key)
		return false
	}
	if u.byKey == nil {
		u.byKey = map[types.NamespacedName]unrecorded{}
	}
	u.byKey[key] = unrecorded{uid: s.machine.UID, status: *s.status.DeepCopy(), details: s.details}
	return true
}

// entry returns the key of s's machine and what is kept for it; nil when nothing is,
// or what is kept is of an earlier machine of that name. u.mu is held.
func (u *unrecordedTasks) entry(s *scope) (types.NamespacedName, *unrecorded) {
	key := types.NamespacedName{Namespace: s.machine.Namespace, Name: s.machine.Name}
	if kept, ok := u.byKey[key]; ok && kept.uid == s.machine.UID {
		return key, &kept
	}
	return key, nil
}

// forget drops what is kept for the machine key, gone from the API server.
func (u *unrecordedTasks) forget(key types.NamespacedName) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byKey, key)
}
