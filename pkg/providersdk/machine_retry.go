package providersdk

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
)

// classify turns the reconcile's error into the Ready condition, the failure fields and
// a requeue. The typed errors of errors.go decide: nothing here reads an error's text.
func (r *Reconciler) classify(ctx context.Context, p *banlieuev1.Provider, s *scope, err error) (ctrl.Result, error) {
	uid := s.machine.UID
	var (
		perm       *PermanentError
		inFlight   *InFlightError
		unreach    *UnreachableError
		unauth     *UnauthorizedError
		taskFailed *TaskFailedError
		retry      *RetryableError
	)
	if err != nil || !s.waitingForGuest {
		r.guest.Forget(uid)
		r.guestWindow.Forget(uid)
		r.looks.look(uid, false)
	}
	if !errors.As(err, &perm) {
		s.setFailure("", "")
	}
	switch {
	case err == nil:
		r.inFlight.Forget(uid)
		r.unreachable.Forget(uid)
		if s.waitingForGuest {
			looks := r.guest
			if s.guestsReported {
				// After the window, the Provider controller wakes the machine once its
				// VM reports an address: no look per VM in the meantime.
				looks = r.guestWindow
			}
			after := looks.When(uid)
			r.looks.look(uid, s.guestsReported && after > 0)
			if after > 0 {
				return ctrl.Result{RequeueAfter: after}, nil
			}
		}
		return ctrl.Result{}, nil
	case errors.Is(err, ErrSessionClosed):
		// The Provider's session was replaced while this reconcile held the old one.
		return ctrl.Result{RequeueAfter: sessionClosedRetry}, nil
	case perm != nil:
		r.inFlight.Forget(uid)
		r.unreachable.Forget(uid)
		reason := perm.Reason
		if reason == "" {
			reason = infrav1.MachineFailedReason
		}
		// The provider gives up until the spec changes: a task still recorded (one that
		// failed for good, say a clone refused for the VM's name) is forgotten, as a
		// crash would forget it, which every driver survives by finding VMs by identity.
		s.setTask(Task{})
		s.ready(metav1.ConditionFalse, reason, perm.Message)
		s.setFailure(reason, perm.Message)
		return ctrl.Result{}, nil
	case errors.As(err, &inFlight):
		r.unreachable.Forget(uid)
		// A wait without a task reference (the backend is busy with something the driver
		// found, not started) keeps the task already recorded: it is the one to poll.
		if inFlight.Task.InFlight() {
			s.setTask(inFlight.Task)
		}
		if inFlight.Task.InFlight() && inFlight.Task.Ref != s.machine.Task.Ref {
			// Polling backs off per task: a new task (the next step of a multi-step
			// update, say) is looked at soon again.
			r.inFlight.Forget(uid)
		}
		s.ready(metav1.ConditionFalse, taskReason(inFlight.Task.Operation), inFlight.Task.Operation+" in progress")
		return ctrl.Result{RequeueAfter: r.inFlight.When(uid)}, nil
	case errors.As(err, &taskFailed):
		// The task is over; the next attempt starts afresh after a backoff.
		r.inFlight.Forget(uid)
		s.setTask(Task{})
		s.ready(metav1.ConditionFalse, infrav1.MachineTaskFailedReason, taskFailed.Error())
		after := r.unreachable.When(uid)
		r.hold(s.machine, after)
		return ctrl.Result{RequeueAfter: after}, nil
	case errors.As(err, &unreach):
		r.sessions.Forget(ctx, p.UID)
		r.wakeProvider(ctx, p, banlieuev1.ProviderBackendReachableCondition)
		s.ready(metav1.ConditionFalse, infrav1.MachineBackendUnreachableReason, unreach.Error())
		after := r.unreachable.When(uid)
		ctrl.LoggerFrom(ctx).Info("Backend unreachable; retrying", "err", redact.Text(unreach.Error()), "after", after.String())
		return ctrl.Result{RequeueAfter: after}, nil
	case errors.As(err, &unauth):
		r.sessions.Forget(ctx, p.UID)
		r.wakeProvider(ctx, p, banlieuev1.ProviderCredentialsValidCondition)
		s.ready(metav1.ConditionFalse, infrav1.MachineCredentialsRejectedReason, unauth.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.Is(err, errCredentialsNotFound), errors.Is(err, errCABundleNotFound):
		s.ready(metav1.ConditionFalse, infrav1.MachineCredentialsNotFoundReason, err.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.Is(err, errUserDataNotFound):
		s.ready(metav1.ConditionFalse, infrav1.MachineUserDataNotFoundReason, err.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.As(err, &retry):
		s.ready(metav1.ConditionFalse, retry.Reason, retry.Message)
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.Is(err, errUserDataNotPermitted):
		// Retried like a missing Secret: the Secret's type is fixed by recreating it, which
		// does not touch the machine.
		s.ready(metav1.ConditionFalse, infrav1.MachineUserDataNotPermittedReason, err.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	default:
		s.ready(metav1.ConditionFalse, infrav1.MachineReconcileErrorReason, err.Error())
		return ctrl.Result{}, redacted(err)
	}
}

// taskReason is the Ready reason while a task doing operation is in flight.
func taskReason(operation string) string {
	switch operation {
	case OperationCreate:
		return infrav1.MachineCreatingReason
	case OperationClone:
		return infrav1.MachineCloningReason
	case OperationUpdate:
		return infrav1.MachineUpdatingReason
	case OperationDelete:
		return infrav1.MachineDeletingReason
	case OperationRelease:
		return infrav1.MachineReleasingReason
	case OperationAdopt:
		return infrav1.MachineAdoptingReason
	}
	return infrav1.MachineTaskInFlightReason
}

// providerWakeGap is the least time between two wakes of one Provider. A Provider whose
// check disagrees with its machines (its inventory answers while their VMs' calls fail,
// as when one Proxmox VE node is down) is then checked at most this often for them, not
// once per failing machine's retry.
const providerWakeGap = 10 * time.Second

// wakeProvider has the Provider controller check p now when p's condition cond still
// says True although the machine just met the contrary. Once the check has written
// False, machines no longer wake it: a thousand machines meeting the same outage cost
// one check.
func (r *Reconciler) wakeProvider(ctx context.Context, p *banlieuev1.Provider, cond string) {
	if r.providerWakeups == nil || !meta.IsStatusConditionTrue(p.Status.Conditions, cond) {
		return
	}
	r.wokeMu.Lock()
	if time.Since(r.woke[p.UID]) < providerWakeGap {
		r.wokeMu.Unlock()
		return
	}
	r.woke[p.UID] = time.Now()
	r.wokeMu.Unlock()
	select {
	case r.providerWakeups <- event.GenericEvent{Object: p}:
		ctrl.LoggerFrom(ctx).V(2).Info("Woke the Provider, whose condition is stale", "condition", cond)
	case <-ctx.Done():
	}
}

// hold keeps a machine whose backend task failed from being retried before its backoff
// has passed, whatever event wakes it (its own status write does), unless its spec
// changes.
type hold struct {
	until      time.Time
	generation int64
}

// hold keeps m from being retried for d.
func (r *Reconciler) hold(m *Machine, d time.Duration) {
	r.holdsMu.Lock()
	defer r.holdsMu.Unlock()
	r.holds[m.UID] = hold{until: time.Now().Add(d), generation: m.Generation}
}

// held returns how long m must still wait before it is retried; 0 when it need not.
func (r *Reconciler) held(m *Machine) time.Duration {
	r.holdsMu.Lock()
	defer r.holdsMu.Unlock()
	h, ok := r.holds[m.UID]
	if !ok {
		return 0
	}
	if wait := time.Until(h.until); wait > 0 && h.generation == m.Generation {
		return wait
	}
	delete(r.holds, m.UID)
	return 0
}

// forget drops every backoff and hold kept for the machine with uid, which is gone.
func (r *Reconciler) forget(uid types.UID) {
	r.inFlight.Forget(uid)
	r.unreachable.Forget(uid)
	r.guest.Forget(uid)
	r.guestWindow.Forget(uid)
	r.looks.look(uid, false)
	r.holdsMu.Lock()
	delete(r.holds, uid)
	r.holdsMu.Unlock()
}

// boundedLimiter stops handing out intervals after max looks: When returns 0 then.
type boundedLimiter struct {
	workqueue.TypedRateLimiter[types.UID]
	max int
}

// newBoundedLimiter returns intervals from base doubling to maxDelay, for maxLooks looks.
func newBoundedLimiter(base, maxDelay time.Duration, maxLooks int) *boundedLimiter {
	return &boundedLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, maxDelay), max: maxLooks}
}

// When returns the next interval, or 0 once max looks were handed out.
func (l *boundedLimiter) When(uid types.UID) time.Duration {
	if l.NumRequeues(uid) >= l.max {
		return 0
	}
	return l.TypedRateLimiter.When(uid)
}
