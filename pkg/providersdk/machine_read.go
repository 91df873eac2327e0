package providersdk

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// readMachine reads the machine named key into u from the cache, and from the API
// server when the cache has not caught up yet with the Reconciler's own last write to
// it (see package ownwrites). A write the cache misses could be a task just recorded,
// or a restart's record, and acting on the older copy would start it twice. Reading
// every machine live instead cost the API server one GET per reconcile, the largest
// request count of a 10,000-VM run.
func (r *Reconciler) readMachine(ctx context.Context, key types.NamespacedName, u *unstructured.Unstructured) error {
	live, err := r.written.Get(ctx, r.machines, r.live, key, u)
	if live {
		machineLiveReads.WithLabelValues(r.class).Inc()
	}
	return err
}
