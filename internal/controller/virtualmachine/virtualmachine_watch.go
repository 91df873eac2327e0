package virtualmachine

import (
	"context"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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
func machineChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*unstructured.Unstructured)
			n, okNew := e.ObjectNew.(*unstructured.Unstructured)
			return !okOld || !okNew || (!contract.OnlyProviderIDChanged(o, n) && !onlyProgressChanged(o, n))
		},
	}
}

// onlyProgressChanged reports whether two versions of a machine differ only in the step
// under way: its Ready condition keeps its status and moves between progressing reasons
// (or changes its message; a machine without one reads as MachineNotReady, as mirror
// reads it), and status.task may change, which the VM does not read. Any other change
// wakes the VM: a change of Ready's status, a failure reason, the generation, metadata
// (deletion, annotations, owners), and every status field, mirrored (addresses,
// initialization, powerState) or not (failureDomain, observedGeneration, other
// conditions, the backend's block).
func onlyProgressChanged(o, n *unstructured.Unstructured) bool {
	if o.GetGeneration() != n.GetGeneration() {
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
	return equality.Semantic.DeepEqual(withoutProgress(o), withoutProgress(n))
}

// machineReady returns the status and reason of the machine's Ready condition, or
// False and MachineNotReady when it has none; ok is false when its conditions do not
// parse.
func machineReady(u *unstructured.Unstructured) (status metav1.ConditionStatus, reason string, ok bool) {
	c, err := contract.Condition(u, banlieuev1.ReadyCondition)
	switch {
	case err != nil:
		return "", "", false
	case c == nil:
		return metav1.ConditionFalse, banlieuev1.VirtualMachineMachineNotReadyReason, true
	}
	return c.Status, c.Reason, c.Status != "" && c.Reason != ""
}

// withoutProgress returns the machine's object without what onlyProgressChanged lets
// change: metadata.resourceVersion and managedFields, status.task and the Ready
// condition, and status fields left empty. It copies maps and lists one level deep
// only, and changes nothing of u.
func withoutProgress(u *unstructured.Unstructured) map[string]any {
	out := maps.Clone(u.Object)
	if md, ok := out["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		delete(md, "resourceVersion")
		delete(md, "managedFields")
		out["metadata"] = md
	}
	status, ok := out["status"].(map[string]any)
	if !ok {
		return out
	}
	status = maps.Clone(status)
	delete(status, "task")
	if conditions, ok := status["conditions"].([]any); ok {
		status["conditions"] = slices.DeleteFunc(slices.Clone(conditions), func(c any) bool {
			m, ok := c.(map[string]any)
			return ok && m["type"] == banlieuev1.ReadyCondition
		})
	}
	for k, v := range status {
		if empty(v) {
			delete(status, k)
		}
	}
	if len(status) == 0 {
		delete(out, "status")
	} else {
		out["status"] = status
	}
	return out
}

// empty reports whether a field's value says nothing: null, {} or [].
func empty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}
