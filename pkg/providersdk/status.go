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
)

// scope is one reconcile of one machine: the machine and the status being computed.
type scope struct {
	machine         *Machine
	status          infrav1.MachineStatus
	details         any
	succeeded       bool
	waitingForGuest bool
	// guestsReported is true when the session is a GuestAddressReporter, so that the
	// Provider controller watches for the guest's address after the short window.
	guestsReported bool
}

// observe copies what the backend reported into the status.
func (s *scope) observe(o Observation, task Task) {
	if o.Exists && !task.InFlight() {
		s.status.Initialization.Provisioned = ptr.To(true)
	}
	s.status.Addresses = o.Addresses
	s.status.PowerState = o.PowerState
	s.status.FailureDomain = o.FailureDomain
	if o.Details != nil {
		s.details = o.Details
	}
	s.setTask(task)
}

// setTask records the task in flight; the start time is kept while the task is the same.
func (s *scope) setTask(t Task) {
	switch {
	case !t.InFlight():
		s.status.Task = nil
	case s.status.Task == nil || s.status.Task.Ref != t.Ref || s.status.Task.Operation != t.Operation:
		s.status.Task = &infrav1.TaskReference{Ref: t.Ref, Operation: t.Operation, StartedAt: metav1.Now()}
	}
}

// ready sets the Ready condition.
func (s *scope) ready(status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.status.Conditions, metav1.Condition{
		Type: banlieuev1.ReadyCondition, Status: status, Reason: reason, Message: message, ObservedGeneration: s.machine.Generation,
	})
}

// contractStatusFields are the status fields the machine contract gives the provider.
var contractStatusFields = []string{"initialization", "addresses", "failureDomain", "powerState", "task", "conditions", "observedGeneration"}

// patchStatus writes the scope's status in one patch, when it differs from before.
// observedGeneration is only advanced by a reconcile that succeeded.
func (r *Reconciler) patchStatus(ctx context.Context, u *unstructured.Unstructured, before *infrav1.MachineStatus, s *scope) error {
	if s.succeeded {
		s.status.ObservedGeneration = s.machine.Generation
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	details, err := r.detailsField(status, s.details)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(*before, s.status) && details == nil {
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
	if err := r.client.Status().Patch(ctx, u, client.MergeFrom(orig)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to patch machine status: %w", err))
	}
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
