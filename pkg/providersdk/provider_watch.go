package providersdk

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
)

// What wakes the Provider controller: its Providers' own changes, the removal of a
// machine of a Provider being deleted, and the checks machines ask for.

// SetupWithManager registers the ProviderReconciler with mgr. It watches the Providers
// of its class and the machines of its kind, so a Provider being deleted lets go as
// soon as its last machine is gone, and the Providers machines wake; the machines to
// wake are read from mgr's cache.
func (r *ProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.machines = mgr.GetCache()
	if err := indexMachinesOnce(mgr, r.gvk); err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	b := ctrl.NewControllerManagedBy(mgr).
		// Its own status writes change neither the generation, the annotations nor the
		// labels (which move a Provider between shards); waking on them would read the
		// inventory again after every change of the conditions.
		For(&banlieuev1.Provider{}, builder.WithPredicates(predicate.NewPredicateFuncs(r.claims),
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		// Only a machine's removal can release a Provider being deleted.
		Watches(u, handler.EnqueueRequestsFromMapFunc(r.deletingProviderOf), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		}))
	if r.checks != nil {
		b = b.WatchesRawSource(source.Channel(r.checks, &handler.EnqueueRequestForObject{}))
	}
	return b.Named(r.class + "-provider").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// claims reports whether o is a Provider of the reconciler's class, and of its shard.
func (r *ProviderReconciler) claims(o client.Object) bool {
	p, ok := o.(*banlieuev1.Provider)
	if ok && r.shard != nil {
		return r.shard.matches(p)
	}
	return ok && p.Spec.ProviderClassRef.Name == r.class
}

// deletingProviderOf maps a machine to its Provider when that Provider is being deleted.
// A Provider that is not has nothing to do when a machine goes: waking it would read
// its inventory again for every VM of a mass deletion.
func (r *ProviderReconciler) deletingProviderOf(ctx context.Context, o client.Object) []reconcile.Request {
	ref, ok := providerOf(o)
	if !ok {
		return nil
	}
	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, ref, p); err != nil || p.DeletionTimestamp.IsZero() {
		return nil // a Provider that is gone has no finalizer left to release
	}
	return []reconcile.Request{{NamespacedName: ref}}
}
