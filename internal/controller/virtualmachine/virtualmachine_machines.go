package virtualmachine

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/intern"
	"github.com/banlieue/banlieue/pkg/ownwrites"
)

// machineKind is how core reads and writes the infrastructure machines of one kind:
// as contract.Machine, the contract's part of them, through a cache, a client and a
// scheme of the kind's own (contract.NewScheme says why one per kind). Core never
// imports a provider's types, and a cache of unstructured machines held three times
// the memory, most of it the backends' blocks core does not read.
type machineKind struct {
	gvk schema.GroupVersionKind
	// cache is the kind's cache, which machines are read from.
	cache cache.Cache
	// client writes to the API server, and reads from it for the few reads the cache
	// may be behind on. Each write is recorded in written.
	client client.Client
	// reader reads a machine from cache, or from the API server when the cache's copy is
	// older than core's own last write of it. A watch that is slow to come back (after
	// an API server restart, its reconnects back off for seconds) leaves the cache with
	// machines from before core's last writes: a VM asked for the power state it had
	// then would find its machine's spec already as asked, skip the write and copy the
	// old status, so report the state asked for before its provider was even told.
	reader client.Reader
	// written is core's last write of each machine of the kind.
	written *ownwrites.Versions
}

// newMachine returns an empty Machine of the kind, to read one into.
func (k *machineKind) newMachine() *contract.Machine {
	m := &contract.Machine{}
	m.SetGroupVersionKind(k.gvk)
	return m
}

// machineKind returns the machines of kind gvk once their cache has synced, making
// their cache and watch the first time: Providers publish machine kinds at run time.
// The new cache is the manager's to start and stop. The wait is outside the lock, so
// a kind whose cache cannot sync (its list forbidden, say) holds only the reconciles of
// its own machines.
func (r *Reconciler) machineKind(ctx context.Context, gvk schema.GroupVersionKind) (*machineKind, error) {
	if gvk.Kind == "" || gvk.Version == "" {
		// A Provider made again has not published its kind yet.
		return nil, fmt.Errorf("no machine kind to read: %q", gvk)
	}
	k, err := r.kindOrNew(gvk)
	if err != nil {
		return nil, err
	}
	if !k.cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache of %s did not sync: %w", gvk, context.Cause(ctx))
	}
	return k, nil
}

// kindOrNew returns the machines of kind gvk, made on first use.
func (r *Reconciler) kindOrNew(gvk schema.GroupVersionKind) (*machineKind, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.kinds[gvk]; ok {
		return k, nil
	}
	k, err := r.newMachineKind(gvk)
	if err != nil {
		return nil, err
	}
	r.kinds[gvk] = k
	return k, nil
}

// newMachineKind makes the cache, client and watch of the machines of kind gvk.
func (r *Reconciler) newMachineKind(gvk schema.GroupVersionKind) (*machineKind, error) {
	scheme := contract.NewScheme(gvk)
	trim := intern.Transform()
	transform := func(obj any) (any, error) {
		obj, err := trim(obj)
		if err != nil || r.Shard == nil {
			return obj, err
		}
		return r.Shard.TrimOthers(obj)
	}
	c, err := cache.New(r.mgr.GetConfig(), cache.Options{
		Scheme: scheme, Mapper: r.mgr.GetRESTMapper(), HTTPClient: r.mgr.GetHTTPClient(), DefaultTransform: transform,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to make the cache of %s: %w", gvk, err)
	}
	if err := r.mgr.Add(c); err != nil {
		return nil, fmt.Errorf("failed to start the cache of %s: %w", gvk, err)
	}
	cl, err := client.New(r.mgr.GetConfig(), client.Options{Scheme: scheme, Mapper: r.mgr.GetRESTMapper(), HTTPClient: r.mgr.GetHTTPClient()})
	if err != nil {
		return nil, fmt.Errorf("failed to make the client of %s: %w", gvk, err)
	}
	written := ownwrites.New()
	k := &machineKind{gvk: gvk, cache: c, written: written, reader: written.Reader(c, cl),
		client: ownwrites.NewClient(cl, written, func(client.Object) bool { return true })}
	err = r.controller.Watch(source.Kind[client.Object](c, k.newMachine(),
		withMachineProgressPriority(handler.EnqueueRequestForOwner(r.scheme, r.mapper, &banlieuev1.VirtualMachine{}, handler.OnlyControllerOwner())),
		machineChanged()))
	if err != nil {
		return nil, fmt.Errorf("failed to watch %s: %w", gvk, err)
	}
	return k, nil
}
