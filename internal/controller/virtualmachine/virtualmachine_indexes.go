package virtualmachine

import (
	"context"
	"fmt"
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
	"github.com/banlieue/banlieue/internal/placement"
	"github.com/banlieue/banlieue/pkg/contract"
)

// Field indexes on VirtualMachines, so that a change to a class, an image or a Provider
// finds the VMs it affects, and placement counts VMs per failure domain, from the cache.
const (
	indexClass    = "spec.classRef.name"
	indexImage    = "spec.imageRef.name"
	indexProvider = "status.scheduled.provider"
	indexLocation = "status.scheduled.location"
)

// unscheduled is the indexProvider value of VMs that have no placement.
const unscheduled = "-"

func setupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	indexes := map[string]func(*banlieuev1.VirtualMachine) string{
		indexClass: func(vm *banlieuev1.VirtualMachine) string { return vm.Spec.ClassRef.Name },
		indexImage: func(vm *banlieuev1.VirtualMachine) string { return vm.Spec.ImageRef.Name },
		indexProvider: func(vm *banlieuev1.VirtualMachine) string {
			if vm.Status.Scheduled == nil {
				return unscheduled
			}
			return locationOf(vm).ProviderKey()
		},
		indexLocation: func(vm *banlieuev1.VirtualMachine) string {
			if vm.Status.Scheduled == nil {
				return ""
			}
			return locationKey(locationOf(vm))
		},
	}
	for field, value := range indexes {
		err := indexer.IndexField(ctx, &banlieuev1.VirtualMachine{}, field, func(o client.Object) []string {
			if v := value(o.(*banlieuev1.VirtualMachine)); v != "" {
				return []string{v}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("failed to index VirtualMachines by %s: %w", field, err)
		}
	}
	return nil
}

func locationOf(vm *banlieuev1.VirtualMachine) placement.Location {
	s := vm.Status.Scheduled
	return placement.Location{ProviderNamespace: s.ProviderNamespace, ProviderName: s.ProviderName, FailureDomain: s.FailureDomain}
}

func locationKey(l placement.Location) string {
	return l.ProviderKey() + "/" + l.FailureDomain
}

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
	conditions, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return "", "", false
	}
	if found {
		for _, c := range conditions {
			m, isMap := c.(map[string]any)
			if !isMap {
				return "", "", false
			}
			if m["type"] != banlieuev1.ReadyCondition {
				continue
			}
			s, sOK := m["status"].(string)
			r, rOK := m["reason"].(string)
			return metav1.ConditionStatus(s), r, sOK && rOK
		}
	}
	return metav1.ConditionFalse, banlieuev1.VirtualMachineMachineNotReadyReason, true
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
