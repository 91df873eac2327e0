package providersdk

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
)

// step is one reconcile of a machine, at the test's start plus at: the machine's UID,
// the task stored in its status and the one the reconcile computed, and whether hold
// keeps the status in memory.
type step struct {
	at               time.Duration
	uid              types.UID
	stored, computed infrav1.TaskReference
	held             bool
}

func TestANewTaskIsKeptInMemoryUntilItHasRunForTheDelay(t *testing.T) {
	const delay = 5 * time.Second
	t0 := time.Now()
	// task is a task in flight that started at t0 plus at.
	task := func(ref, op string, at time.Duration) infrav1.TaskReference {
		return infrav1.TaskReference{Ref: ref, Operation: op, StartedAt: &metav1.Time{Time: t0.Add(at)}}
	}
	clone := task("task-1", OperationClone, 0)
	none := infrav1.TaskReference{}
	for _, tt := range []struct {
		name string
		// steps are the reconciles, each at t0 plus its offset: the task stored and
		// computed, and whether hold keeps the status.
		steps []step
	}{
		{name: "a task that ends within the delay is never written", steps: []step{{0, "a", none, clone, true}, {4 * time.Second, "a", none, clone, true}, {4500 * time.Millisecond, "a", none, none, false}}},
		{name: "a task is written as it turns delay old", steps: []step{{0, "a", none, clone, true}, {delay, "a", none, clone, false}}},
		{name: "each task counts from its own start, not the first one's", steps: []step{
			{0, "a", none, clone, true},
			{3 * time.Second, "a", none, task("task-2", OperationUpdate, 3*time.Second), true},
			{7 * time.Second, "a", none, task("task-2", OperationUpdate, 3*time.Second), true},
			{8 * time.Second, "a", none, task("task-2", OperationUpdate, 3*time.Second), false},
		}},
		{name: "a task already stored is written as usual", steps: []step{{0, "a", clone, clone, false}}},
		{name: "a machine made again under the same name starts afresh", steps: []step{{0, "a", none, clone, true}, {10 * time.Second, "b", none, task("task-3", OperationClone, 10*time.Second), true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := &unrecordedTasks{delay: delay}
			for i, st := range tt.steps {
				s := &scope{machine: &Machine{UID: st.uid, Namespace: "ns", Name: "web"}, before: infrav1.MachineStatus{Task: st.stored}}
				_ = u.restore(s, "")
				s.status.Task = st.computed
				if got := u.hold(s, t0.Add(st.at)); got != st.held {
					t.Errorf("step %d: held %v, want %v", i, got, st.held)
				}
			}
		})
	}
}

func TestAKeptTaskIsWhatTheNextReconcilePollsAndForgetDropsIt(t *testing.T) {
	u := &unrecordedTasks{delay: time.Minute}
	s := &scope{machine: &Machine{UID: "a", Namespace: "ns", Name: "web"}}
	s.status.Task = infrav1.TaskReference{Ref: "task-1", Operation: OperationClone}
	if !u.hold(s, time.Now()) {
		t.Fatal("the new task was not kept")
	}
	next := &scope{machine: &Machine{UID: "a", Namespace: "ns", Name: "web"}}
	_ = u.restore(next, "")
	if next.machine.Task.Ref != "task-1" || next.status.Task.Ref != "task-1" {
		t.Errorf("the next reconcile polls %+v with status task %+v, want task-1", next.machine.Task, next.status.Task)
	}
	u.forget(types.NamespacedName{Namespace: "ns", Name: "web"})
	again := &scope{machine: &Machine{UID: "a", Namespace: "ns", Name: "web"}}
	_ = u.restore(again, "")
	if again.machine.Task.InFlight() {
		t.Errorf("a forgotten machine's task is still restored: %+v", again.machine.Task)
	}
}
