// Package ownwrites lets a controller that reads from a cache act on its own last
// write of an object, never on a copy the cache holds from before it. A controller
// woken right after it wrote an object (by another object's event, or a requeue) can
// read the object before the watch has brought the write back; acting on that older
// copy takes the same step a second time: a task started twice, a status written
// again. Reading every object from the API server instead costs a GET per reconcile.
//
// A Versions records the resourceVersion each write of the controller's left an object
// at (through the Client that NewClient returns), and Get reads an object from the API
// server only when the cache's copy is older than that. Any other writer's change the
// cache is late with reaches the controller by the watch, as for every controller.
package ownwrites

import (
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Versions remembers, by object, the resourceVersion of the controller's last write to
// it. The zero Versions is not usable; use New.
type Versions struct {
	mu sync.Mutex
	rv map[types.NamespacedName]uint64
}

// New returns an empty Versions.
func New() *Versions {
	return &Versions{rv: map[types.NamespacedName]uint64{}}
}

// Wrote records the resourceVersion o has after a write of the controller's. A version
// that is not a number (an API server not backed by etcd) is recorded as the largest,
// so every later read of o is made live.
func (w *Versions) Wrote(o client.Object) {
	v, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		v = ^uint64(0)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rv[client.ObjectKeyFromObject(o)] = v
}

// Behind reports whether a copy of the object named key at resourceVersion rv is older
// than the controller's last write to it. etcd's resourceVersions grow with every
// write, so a smaller one is older, an object deleted and made again under its name
// included; one that is not a number is never known to be as new.
func (w *Versions) Behind(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	last, ok := w.rv[key]
	w.mu.Unlock()
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	return err != nil || v < last
}

// Forget drops what is remembered of the object named key, which is gone.
func (w *Versions) Forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// Len is the number of objects whose last write is remembered.
func (w *Versions) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rv)
}

// Get reads the object named key into obj from cache, and again from live (the API
// server) when the cache's copy is older than the controller's last write to it. It
// reports whether it read live.
func (w *Versions) Get(ctx context.Context, cache, live client.Reader, key types.NamespacedName, obj client.Object) (bool, error) {
	if err := cache.Get(ctx, key, obj); err != nil {
		return false, err
	}
	if !w.Behind(key, obj.GetResourceVersion()) {
		return false, nil
	}
	return true, live.Get(ctx, key, obj)
}

// Reader returns a client.Reader that reads as Get does, from cache and, when the
// cache's copy is older than the controller's last write of it, from live; it lists
// from cache.
func (w *Versions) Reader(cache, live client.Reader) client.Reader {
	return reader{Reader: cache, live: live, written: w}
}

type reader struct {
	client.Reader
	live    client.Reader
	written *Versions
}

// Get reads obj as Versions.Get does; it takes no options.
func (r reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	_, err := r.written.Get(ctx, r.Reader, r.live, key, obj)
	return err
}

// NewClient returns c recording in w, after each successful write of an object that
// mine accepts, the object's new resourceVersion. Recording at the client, not at each
// write site, means a write added later cannot forget to.
func NewClient(c client.Client, w *Versions, mine func(client.Object) bool) client.Client {
	return recordingClient{Client: c, written: w, mine: mine}
}

type recordingClient struct {
	client.Client
	written *Versions
	mine    func(client.Object) bool
}

// Patch patches obj and records its resourceVersion when it is mine.
func (c recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.record(obj, c.Client.Patch(ctx, obj, patch, opts...))
}

// Update updates obj and records its resourceVersion when it is mine.
func (c recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.record(obj, c.Client.Update(ctx, obj, opts...))
}

// Apply applies obj and records its resourceVersion when it is mine. Only an apply
// configuration that is an object itself (client.ApplyConfigurationFromUnstructured's,
// which the API server's answer is read into) can be recorded.
func (c recordingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	err := c.Client.Apply(ctx, obj, opts...)
	if o, ok := obj.(client.Object); ok {
		return c.record(o, err)
	}
	return err
}

// Status returns the status writer, recording as the client does.
func (c recordingClient) Status() client.SubResourceWriter {
	return recordingStatusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

func (c recordingClient) record(obj client.Object, err error) error {
	if err == nil && c.mine(obj) {
		c.written.Wrote(obj)
	}
	return err
}

// recordingStatusWriter is recordingClient's status writer.
type recordingStatusWriter struct {
	client.SubResourceWriter
	c recordingClient
}

// Patch patches obj's status and records its resourceVersion when it is mine.
func (w recordingStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return w.c.record(obj, w.SubResourceWriter.Patch(ctx, obj, patch, opts...))
}

// Update updates obj's status and records its resourceVersion when it is mine.
func (w recordingStatusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return w.c.record(obj, w.SubResourceWriter.Update(ctx, obj, opts...))
}
