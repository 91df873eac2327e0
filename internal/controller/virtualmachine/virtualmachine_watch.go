package virtualmachine

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
)

// What wakes a VM: the mappers from classes, images and Providers to the VMs they
// affect (through the indexes of virtualmachine_indexes.go), and the predicates that
// let through only the Provider and machine events a VM acts on.

// vmsUsing maps a class or image to the VMs that refer to it.
func (r *Reconciler) vmsUsing(index string) func(context.Context, client.Object) []ctrl.Request {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		return r.requestsFor(ctx, client.MatchingFields{index: o.GetName()})
	}
}

// vmsAffectedByProvider maps a Provider to the VMs placed on it and to every VM that
// is waiting for a placement, which the Provider may now offer.
func (r *Reconciler) vmsAffectedByProvider(ctx context.Context, o client.Object) []ctrl.Request {
	key := o.GetNamespace() + "/" + o.GetName()
	return append(r.requestsFor(ctx, client.MatchingFields{indexProvider: key}),
		r.requestsFor(ctx, client.MatchingFields{indexProvider: unscheduled})...)
}

func (r *Reconciler) requestsFor(ctx context.Context, sel client.MatchingFields) []ctrl.Request {
	list := &banlieuev1.VirtualMachineList{}
	if err := r.Client.List(ctx, list, sel, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list VirtualMachines", "selector", sel)
		return nil
	}
	out := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return out
}

// providerChanged passes Provider events that can change placement: creation, deletion,
// and updates of labels, spec or status, but not a resync of an unchanged Provider.
func providerChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*banlieuev1.Provider), e.ObjectNew.(*banlieuev1.Provider)
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
				!equality.Semantic.DeepEqual(o.Status, n.Status)
		},
	}
}

// machineChanged passes every machine event but an update that changes nothing the VM
// acts on:
//
//   - one that changed nothing except spec.providerID. A provider writes its status right
//     after the providerID, with the new status.observedGeneration, and that event carries
//     the providerID to the VM in the same status write: one VM write saved per machine.
//   - one that only moves the machine from one step under way to another (see
//     onlyProgressChanged): the VM, still not Ready and Provisioning, would write nothing
//     new, and a reconcile is saved per step.
//
// What a backend adds to its machines never reaches it: core's cache holds the
// contract's part alone (machineKind).
func machineChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*contract.Machine)
			n, okNew := e.ObjectNew.(*contract.Machine)
			return !okOld || !okNew || (!onlyProviderIDChanged(o, n) && !onlyProgressChanged(o, n))
		},
	}
}

// onlyProviderIDChanged reports whether spec.providerID is all that differs between two
// versions of a machine, besides what every write changes (resourceVersion, generation).
func onlyProviderIDChanged(o, n *contract.Machine) bool {
	// Most updates are status writes, which leave the generation alone: they need no copy.
	if o.Generation == n.Generation || o.Spec.ProviderID == n.Spec.ProviderID {
		return false
	}
	return equality.Semantic.DeepEqual(without(o, withoutProviderID), without(n, withoutProviderID))
}

// withoutProviderID clears what onlyProviderIDChanged lets change: spec.providerID and
// the generation its write advanced.
func withoutProviderID(m *contract.Machine) { m.Spec.ProviderID, m.Generation = "", 0 }

// onlyProgressChanged reports whether two versions of a machine differ only in the step
// under way: its Ready condition keeps its status and moves between progressing reasons
// (or changes its message; a machine without one reads as MachineNotReady, as mirror
// reads it), and status.task may change, which the VM does not read. Any other change
// wakes the VM: a change of Ready's status, a failure reason, the generation, metadata
// (deletion, annotations, owners), and every status field of the contract, mirrored
// (addresses, initialization, powerState) or not (failureDomain, observedGeneration,
// other conditions).
func onlyProgressChanged(o, n *contract.Machine) bool {
	if o.Generation != n.Generation {
		return false
	}
	was, wasReason, ok := machineReady(o)
	if !ok || !inProgress(was, wasReason) {
		return false
	}
	is, isReason, ok := machineReady(n)
	if !ok || is != was || !inProgress(is, isReason) {
		return false
	}
	return equality.Semantic.DeepEqual(without(o, withoutProgress), without(n, withoutProgress))
}

// machineReady returns the status and reason of the machine's Ready condition, or
// False and MachineNotReady when it has none; ok is false when it has no status or
// reason.
func machineReady(m *contract.Machine) (status metav1.ConditionStatus, reason string, ok bool) {
	c := meta.FindStatusCondition(m.Status.Conditions, banlieuev1.ReadyCondition)
	if c == nil {
		return metav1.ConditionFalse, banlieuev1.VirtualMachineMachineNotReadyReason, true
	}
	return c.Status, c.Reason, c.Status != "" && c.Reason != ""
}

// withoutProgress clears what onlyProgressChanged lets change: status.task and the
// Ready condition.
func withoutProgress(m *contract.Machine) {
	m.Status.Task = infrav1.TaskReference{}
	m.Status.Conditions = slices.DeleteFunc(m.Status.Conditions, func(c metav1.Condition) bool { return c.Type == banlieuev1.ReadyCondition })
}

// without returns a copy of the machine without its resourceVersion and what clearSome
// clears; the cached machine is left as it is.
func without(m *contract.Machine, clearSome func(*contract.Machine)) *contract.Machine {
	c := m.DeepCopy()
	c.ResourceVersion = ""
	clearSome(c)
	return c
}
