package providersdk

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/redact"
)

// scope is one reconcile of one machine: the machine and the status being computed.
// Its methods change only the status in memory; patchStatus writes it once.
type scope struct {
	machine *Machine
	// before is the contract status as read; status is what the reconcile makes of it.
	before, status infrav1.MachineStatus
	// details is the backend status block to write; nil keeps the stored one.
	details any
	// stored is the machine as read when machine.Object is a copy with what the
	// provider kept in memory (unrecordedTasks); nil when machine.Object is as read.
	stored          *unstructured.Unstructured
	succeeded       bool
	waitingForGuest bool
	// guestsReported is true when the session is a GuestAddressReporter, so that the
	// Provider controller watches for the guest's address after the short window.
	guestsReported bool
	// pausedBy says why the machine is paused, "" when it is not; pauseKnown is true
	// once the reconcile has found out. patchStatus writes the Paused condition from them.
	pausedBy   string
	pauseKnown bool
	// restartRequired is the RestartRequired condition the last observation calls for;
	// patchStatus sets it, with the generation. nil when the reconcile observed nothing.
	restartRequired *metav1.Condition
	// bootstrapFrom is the owning Cluster API Machine, "<namespace>/<name>", when the
	// machine's user data is that Machine's bootstrap data Secret; "" when it is
	// spec.userData's.
	bootstrapFrom string
}

// newScope reads the machine's contract spec and status into a scope.
func newScope(u *unstructured.Unstructured) (*scope, error) {
	spec, err := contract.Spec(u)
	if err != nil {
		return nil, err
	}
	status, err := contract.Status(u)
	if err != nil {
		return nil, err
	}
	m := &Machine{UID: u.GetUID(), Namespace: u.GetNamespace(), Name: u.GetName(), Generation: u.GetGeneration(), Spec: spec, Object: u,
		Deleting: !u.GetDeletionTimestamp().IsZero()}
	if t := status.Task; t.IsDefined() {
		m.Task = Task{Ref: t.Ref, Operation: t.Operation}
		if t.StartedAt != nil {
			m.Task.StartedAt = t.StartedAt.Time
		}
	}
	return &scope{machine: m, before: *status.DeepCopy(), status: status}, nil
}

// observe copies what the backend reported into the status.
func (s *scope) observe(o Observation, task Task) {
	if o.Exists && !task.InFlight() {
		s.status.Initialization.Provisioned = ptr.To(true)
	}
	s.status.Addresses = o.Addresses
	s.status.PowerState = o.PowerState
	if o.Hardware != nil {
		s.status.Hardware = ptr.To(o.Hardware.Observed())
	}
	s.status.FailureDomain = o.FailureDomain
	s.recordDetails(o.Details)
	s.setTask(task)
	s.setRestartRequired(o)
}

// setRestartRequired records the RestartRequired condition from what the VM found waits
// for its next power cycle; a machine without a VM has none.
func (s *scope) setRestartRequired(o Observation) {
	switch {
	case !o.Exists:
		s.restartRequired = nil
		meta.RemoveStatusCondition(&s.status.Conditions, infrav1.MachineRestartRequiredCondition)
	case len(o.PendingRestart) > 0:
		s.restartRequired = &metav1.Condition{Type: infrav1.MachineRestartRequiredCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.MachineHardwareChangePendingReason, Message: "the VM's next restart applies " + JoinPhrases(o.PendingRestart) +
				"; set spec.restartRequestedAt, or power the VM off and on again"}
	default:
		s.restartRequired = &metav1.Condition{Type: infrav1.MachineRestartRequiredCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.MachineNoPendingChangeReason}
	}
}

// recordDetails keeps the backend's references to the VM for the status block.
func (s *scope) recordDetails(details any) {
	if details != nil {
		s.details = details
	}
}

// setTask records the task in flight; the start time is kept while the task is the same.
func (s *scope) setTask(t Task) {
	switch {
	case !t.InFlight():
		s.status.Task = infrav1.TaskReference{}
	case !s.status.Task.IsDefined() || s.status.Task.Ref != t.Ref || s.status.Task.Operation != t.Operation:
		s.status.Task = infrav1.TaskReference{Ref: t.Ref, Operation: t.Operation, StartedAt: ptr.To(metav1.Now())}
	}
}

// ready sets the Ready condition.
func (s *scope) ready(status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.status.Conditions, condition(banlieuev1.ReadyCondition, status, reason, message, s.machine.Generation))
}

// setPaused records whether the machine is paused: why it is, or "" when it is not.
func (s *scope) setPaused(why string) { s.pausedBy, s.pauseKnown = why, true }

// setFailure sets, or with an empty reason clears, status.failureReason and
// failureMessage.
func (s *scope) setFailure(reason, message string) {
	s.status.FailureReason, s.status.FailureMessage = reason, redact.Text(message)
}

// condition builds a condition of the object's generation. Every condition the SDK
// writes is built here, so every message (a backend's error text among them) is redacted.
func condition(t string, status metav1.ConditionStatus, reason, message string, generation int64) metav1.Condition {
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: redact.Text(message), ObservedGeneration: generation}
}

// pausedCondition is the Paused condition: True with why as its message, or False
// (NotPaused) when why is empty.
func pausedCondition(why string, generation int64) metav1.Condition {
	if why == "" {
		return condition(infrav1.MachinePausedCondition, metav1.ConditionFalse, infrav1.MachineNotPausedReason, "", generation)
	}
	return condition(infrav1.MachinePausedCondition, metav1.ConditionTrue, infrav1.MachinePausedReason, why, generation)
}

// contractStatusFields are the status fields the machine contract gives the provider.
var contractStatusFields = []string{"initialization", "addresses", "failureDomain", "powerState", "hardware", "task", "failureReason", "failureMessage", "conditions", "observedGeneration", "restart"}

// patchStatus writes the scope's status in one patch, when it differs from what was
// read. observedGeneration is only advanced by a reconcile that succeeded.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) error {
	return r.writeStatus(ctx, s, false)
}

// writeStatus is patchStatus; with lock, the patch carries the resourceVersion read, so
// it fails with a conflict when the machine changed since: a record that a decision
// depends on (status.restart) is never written over one this reconcile did not see.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, lock bool) error {
	if s.succeeded {
		s.status.ObservedGeneration = s.machine.Generation
	}
	if s.pauseKnown {
		// Set last, with the generation a providerID write may have advanced.
		meta.SetStatusCondition(&s.status.Conditions, pausedCondition(s.pausedBy, s.machine.Generation))
	}
	if c := s.restartRequired; c != nil {
		meta.SetStatusCondition(&s.status.Conditions, condition(c.Type, c.Status, c.Reason, c.Message, s.machine.Generation))
	}
	u := s.machine.Object
	if s.stored != nil {
		u = s.stored
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	details, err := r.detailsField(status, s.details)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(s.before, s.status) && details == nil {
		return nil
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s.status)
	if err != nil {
		return fmt.Errorf("failed to convert machine status: %w", err)
	}
	orig := u.DeepCopy()
	if details != nil {
		status[r.statusBlock] = details
	}
	for _, f := range contractStatusFields {
		if v, ok := fields[f]; ok {
			status[f] = v
		} else {
			delete(status, f)
		}
	}
	u.Object["status"] = status
	var opts []client.MergeFromOption
	if lock {
		opts = append(opts, client.MergeFromWithOptimisticLock{})
	}
	if err := r.client.Status().Patch(ctx, u, client.MergeFromWithOptions(orig, opts...)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to patch machine status: %w", err))
	}
	s.before = *s.status.DeepCopy()
	return nil
}

// detailsField returns the backend status block to write, or nil when it is unchanged
// (or the Reconciler has no block).
func (r *Reconciler) detailsField(status map[string]any, details any) (map[string]any, error) {
	if r.statusBlock == "" || details == nil {
		return nil, nil
	}
	block, err := runtime.DefaultUnstructuredConverter.ToUnstructured(details)
	if err != nil {
		return nil, fmt.Errorf("failed to convert backend status: %w", err)
	}
	if equality.Semantic.DeepEqual(status[r.statusBlock], any(block)) {
		return nil, nil
	}
	return block, nil
}
