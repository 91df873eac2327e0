package providersdk

import (
	"context"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
)

// SetupWithManager registers the Reconciler with mgr. It watches its machines and the
// Providers they run on, for the changes the machines act on (providerChangeWakesMachines);
// the machines of a Provider are found through the field index IndexMachines makes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if !r.readerSet {
		r.reader = mgr.GetAPIReader()
		if !r.sessionsSet {
			r.sessions.reader = r.reader
		}
	}
	if err := indexMachinesOnce(mgr, r.gvk); err != nil {
		return err
	}
	r.machines = mgr.GetCache()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	b := ctrl.NewControllerManagedBy(mgr).
		For(u, builder.WithPredicates(machineChanged())).
		Watches(&banlieuev1.Provider{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfProvider),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: providerChangeWakesMachines}))
	if r.wakeups != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	}
	return b.Named(strings.ToLower(r.gvk.Kind)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(r)
}

// machineChanged passes the machine updates the Reconciler has to act on: a new
// generation or new annotations. Its own status writes change neither, and its
// spec.providerID write changes nothing else; waking on them would cost a backend look
// per write.
func machineChanged() predicate.Predicate {
	return predicate.And[client.Object](
		predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}),
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*unstructured.Unstructured)
			n, okNew := e.ObjectNew.(*unstructured.Unstructured)
			return !okOld || !okNew || !contract.OnlyProviderIDChanged(o, n)
		}},
	)
}

// machinesOfProvider maps a Provider to the machines on it, read from the cache through
// the index IndexMachines makes.
func (r *Reconciler) machinesOfProvider(ctx context.Context, p client.Object) []reconcile.Request {
	machines, err := machinesOn(ctx, r.machines, r.gvk, p, client.UnsafeDisableDeepCopy)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list machines of Provider", "Provider", klog.KObj(p))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(machines))
	for i := range machines {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&machines[i])})
	}
	return reqs
}

// providerHealth are the Provider conditions whose status machines act on: a machine
// backing off from an unreachable backend or rejected credentials retries as soon as
// one of them changes.
var providerHealth = []string{banlieuev1.ReadyCondition, banlieuev1.ProviderBackendReachableCondition, banlieuev1.ProviderCredentialsValidCondition}

// providerChangeWakesMachines reports whether a Provider update changed what its
// machines act on: its spec (paused included), its deletion, its annotations or the
// status of a providerHealth condition. The Provider controller's periodic check
// rewrites failure domains and messages; waking every machine of the Provider for those
// would cost a backend look per machine.
func providerChangeWakesMachines(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*banlieuev1.Provider)
	p, okNew := e.ObjectNew.(*banlieuev1.Provider)
	if !okOld || !okNew {
		return true
	}
	if old.Generation != p.Generation || !old.DeletionTimestamp.Equal(p.DeletionTimestamp) || !maps.Equal(old.Annotations, p.Annotations) {
		return true
	}
	for _, t := range providerHealth {
		if conditionStatus(old.Status.Conditions, t) != conditionStatus(p.Status.Conditions, t) {
			return true
		}
	}
	return false
}

// conditionStatus is the status of the condition t, "" when there is none.
func conditionStatus(conditions []metav1.Condition, t string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conditions, t); c != nil {
		return c.Status
	}
	return ""
}
