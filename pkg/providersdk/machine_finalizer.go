package providersdk

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// addFinalizer puts the Reconciler's finalizer on a machine that does not carry it yet
// (core creates its machines with it, so this write is for machines made otherwise).
func (r *Reconciler) addFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	before := u.DeepCopy()
	controllerutil.AddFinalizer(u, r.finalizer)
	if err := r.client.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to add finalizer: %w", err)
	}
	return nil
}

// removeFinalizer lets a machine whose VM is gone go, and forgets what the Reconciler
// kept for it.
func (r *Reconciler) removeFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	before := u.DeepCopy()
	if !controllerutil.RemoveFinalizer(u, r.finalizer) {
		return nil
	}
	r.forget(u.GetUID())
	if err := r.client.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to remove finalizer: %w", err))
	}
	return nil
}
