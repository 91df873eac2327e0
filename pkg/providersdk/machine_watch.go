package providersdk

import (
	"context"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
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
	r.machines, r.live = mgr.GetCache(), mgr.GetAPIReader()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	b := ctrl.NewControllerManagedBy(mgr).
		For(u, builder.WithPredicates(predicate.NewPredicateFuncs(r.inScope), machineChanged())).
		Watches(&banlieuev1.Provider{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfProvider),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: providerChangeWakesMachines}))
	installed, err := clusterAPIInstalled(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	if installed {
		// Cluster API's Machines and Clusters wake the machines waiting on them and are
		// read from the cache these watches fill.
		r.capi, r.capiWatched = mgr.GetCache(), true
		filtered := predicate.NewPredicateFuncs(r.filtered)
		capiMachine := &unstructured.Unstructured{}
		capiMachine.SetGroupVersionKind(capiMachineGVK)
		cluster := &unstructured.Unstructured{}
		cluster.SetGroupVersionKind(capiClusterGVK)
		b = b.Watches(capiMachine, handler.EnqueueRequestsFromMapFunc(r.machineOfCAPIMachine),
			builder.WithPredicates(filtered, predicate.Funcs{UpdateFunc: capiMachineChangeWakesMachine})).
			Watches(cluster, handler.EnqueueRequestsFromMapFunc(r.machinesOfCluster),
				builder.WithPredicates(filtered, predicate.Funcs{UpdateFunc: clusterChangeWakesMachines}))
	} else {
		// Read from the API server, should they be installed later; a machine waiting on
		// them then looks again every clusterAPIRequeue.
		r.capi = mgr.GetAPIReader()
		mgr.GetLogger().WithName(strings.ToLower(r.gvk.Kind)).Info("Cluster API's CRDs are not installed; machines that wait on Cluster API objects look again every 30s",
			"machine", capiMachineGVK.String(), "cluster", capiClusterGVK.String())
	}
	if r.wakeups != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	}
	return b.Named(strings.ToLower(r.gvk.Kind)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(r)
}

// inScope reports whether the Reconciler reconciles o: o is in its namespace and
// passes its watch filter (WithWatchScope).
func (r *Reconciler) inScope(o client.Object) bool {
	return (r.namespace == "" || o.GetNamespace() == r.namespace) && r.filtered(o)
}

// filtered reports whether o carries the watch filter's label, when there is a filter.
func (r *Reconciler) filtered(o client.Object) bool {
	return r.watchFilter == "" || o.GetLabels()[WatchFilterLabel] == r.watchFilter
}

// machineChanged passes the machine updates the Reconciler has to act on: a new
// generation, new annotations, new labels or new owners (Cluster API's adoption of the
// machine, its cluster-name and watch-filter labels). Its own status writes change
// none of them, and its spec.providerID write changes nothing else; waking on them
// would cost a backend look per write.
func machineChanged() predicate.Predicate {
	return predicate.And[client.Object](
		predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{}, predicate.Funcs{UpdateFunc: ownersChanged}),
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*unstructured.Unstructured)
			n, okNew := e.ObjectNew.(*unstructured.Unstructured)
			return !okOld || !okNew || !contract.OnlyProviderIDChanged(o, n)
		}},
	)
}

// ownersChanged reports whether an update changed the object's ownerReferences.
func ownersChanged(e event.UpdateEvent) bool {
	return !equality.Semantic.DeepEqual(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences())
}

// machinesOfProvider maps a Provider to the machines on it, read from the cache through
// the index IndexMachines makes.
func (r *Reconciler) machinesOfProvider(ctx context.Context, p client.Object) []reconcile.Request {
	if pr, ok := p.(*banlieuev1.Provider); ok && r.shard != nil && !r.shard.matches(pr) {
		return nil
	}
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
// machines act on: its spec (paused included), its deletion, its annotations, its labels
// (which provider shard serves it) or the status of a providerHealth condition. The Provider controller's periodic check
// rewrites failure domains and messages; waking every machine of the Provider for those
// would cost a backend look per machine.
func providerChangeWakesMachines(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*banlieuev1.Provider)
	p, okNew := e.ObjectNew.(*banlieuev1.Provider)
	if !okOld || !okNew {
		return true
	}
	if old.Generation != p.Generation || !old.DeletionTimestamp.Equal(p.DeletionTimestamp) || !maps.Equal(old.Annotations, p.Annotations) ||
		!maps.Equal(old.Labels, p.Labels) { // labels move a Provider between provider shards
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
