package providersdk

import (
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readMachine reads the machine named key into u from the cache, and from the API
// server when the cache has not caught up yet with the Reconciler's own last write to
// it. A write the cache misses could be a task just recorded, or a restart's record,
// and acting on the older copy would start it twice; any other writer's change the
// cache is late with reaches the Reconciler by the watch, as for every controller.
// Reading every machine live instead cost the API server one GET per reconcile, the
// largest request count of a 10,000-VM run.
func (r *Reconciler) readMachine(ctx context.Context, key types.NamespacedName, u *unstructured.Unstructured) error {
	if err := r.machines.Get(ctx, key, u); err != nil {
		return err
	}
	if !r.written.behind(key, u.GetResourceVersion()) {
		return nil
	}
	machineLiveReads.WithLabelValues(r.class).Inc()
	return r.live.Get(ctx, key, u)
}

// writtenVersions remembers, by machine, the resourceVersion of the Reconciler's last
// write to it.
type writtenVersions struct {
	mu sync.Mutex
	rv map[types.NamespacedName]uint64
}

func newWrittenVersions() *writtenVersions {
	return &writtenVersions{rv: map[types.NamespacedName]uint64{}}
}

// wrote records the resourceVersion o has after a write of the Reconciler's. A version
// that is not a number (an API server not backed by etcd) is recorded as the largest,
// so every later read of o is made live.
func (w *writtenVersions) wrote(o client.Object) {
	v, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		v = ^uint64(0)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rv[client.ObjectKeyFromObject(o)] = v
}

// behind reports whether a copy of the machine at resourceVersion rv is older than the
// Reconciler's last write to it. etcd's resourceVersions grow with every write, so a
// smaller one is older, a machine deleted and made again under its name included; one
// that is not a number is never known to be as new.
func (w *writtenVersions) behind(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	last, ok := w.rv[key]
	w.mu.Unlock()
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	return err != nil || v < last
}

// forget drops what is remembered of the machine named key, which is gone.
func (w *writtenVersions) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// recordingClient is the client the Reconciler writes through. After each successful
// write of a machine of its kind it records the machine's new resourceVersion, which
// readMachine compares the cache with: recording at the client, not at each write
// site, means a write added later cannot forget to.
type recordingClient struct {
	client.Client
	gvk     schema.GroupVersionKind
	written *writtenVersions
}

// Patch patches obj and records its resourceVersion when obj is a machine.
func (c recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.record(obj, c.Client.Patch(ctx, obj, patch, opts...))
}

// Update updates obj and records its resourceVersion when obj is a machine.
func (c recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.record(obj, c.Client.Update(ctx, obj, opts...))
}

// Status returns the status writer, recording as the client does.
func (c recordingClient) Status() client.SubResourceWriter {
	return recordingStatusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

func (c recordingClient) record(obj client.Object, err error) error {
	if err == nil && obj.GetObjectKind().GroupVersionKind() == c.gvk {
		c.written.wrote(obj)
	}
	return err
}

// recordingStatusWriter is recordingClient's status writer.
type recordingStatusWriter struct {
	client.SubResourceWriter
	c recordingClient
}

// Patch patches obj's status and records its resourceVersion when obj is a machine.
func (w recordingStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return w.c.record(obj, w.SubResourceWriter.Patch(ctx, obj, patch, opts...))
}

// Update updates obj's status and records its resourceVersion when obj is a machine.
func (w recordingStatusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return w.c.record(obj, w.SubResourceWriter.Update(ctx, obj, opts...))
}
