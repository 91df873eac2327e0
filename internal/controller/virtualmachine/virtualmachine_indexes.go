package virtualmachine

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/placement"
)

// Field indexes on VirtualMachines, so that a change to a class, an image or a Provider
// finds the VMs it affects, from the cache.
const (
	indexClass    = "spec.classRef.name"
	indexImage    = "spec.imageRef.name"
	indexProvider = "status.scheduled.provider"
)

// unscheduled is the indexProvider value of VMs that have no placement.
const unscheduled = "-"

func setupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	indexes := map[string]func(*banlieuev1.VirtualMachine) string{
		indexClass: func(vm *banlieuev1.VirtualMachine) string { return vm.Spec.ClassRef.Name },
		indexImage: func(vm *banlieuev1.VirtualMachine) string { return vm.Spec.ImageRef.Name },
		indexProvider: func(vm *banlieuev1.VirtualMachine) string {
			if !vm.Status.Scheduled.IsDefined() {
				return unscheduled
			}
			return locationOf(vm).ProviderKey()
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

// locationLoad counts the VMs placed in each location (Provider and failure domain),
// kept by a handler of the VM informer's events. Placement asks how many VMs each
// candidate domain holds for every VM it places; a List by a field index copies every
// VM of the domain, and an informer index's keys are copied too, each a cost that
// grows with the square of the VMs (the index keys alone were 400 MB of core's
// allocations placing 10,000). A count is looked up without a copy. It trails the
// cache by the handler's queue, as the cache trails the API server.
type locationLoad struct {
	mu     sync.Mutex
	counts map[placement.Location]int
	// synced reports whether the handler has counted every VM the informer listed when
	// it started.
	synced toolscache.InformerSynced
}

// setupLocationLoad counts the VMs of each location from the VM informer of c.
func setupLocationLoad(ctx context.Context, c cache.Informers) (*locationLoad, error) {
	inf, err := c.GetInformer(ctx, &banlieuev1.VirtualMachine{})
	if err != nil {
		return nil, fmt.Errorf("failed to get the VirtualMachine informer: %w", err)
	}
	l := &locationLoad{counts: map[placement.Location]int{}}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.move(nil, obj) },
		UpdateFunc: l.move,
		DeleteFunc: func(obj any) { l.move(obj, nil) },
	})
	if err != nil {
		return nil, fmt.Errorf("failed to count VirtualMachines by location: %w", err)
	}
	l.synced = reg.HasSynced
	return l, nil
}

// wait returns once every VM the informer listed when it started is counted, so that a
// core that has just started does not place VMs by counts still filling; false when
// ctx ends first.
func (l *locationLoad) wait(ctx context.Context) bool {
	// Every placement asks: once synced, without the polling machinery.
	return l.synced() || toolscache.WaitForCacheSync(ctx.Done(), l.synced)
}

// move counts a VM out of the location it was placed in before (nil: none) and into
// the one it is placed in now (nil: gone).
func (l *locationLoad) move(before, now any) {
	from, wasPlaced := placedAt(before)
	to, isPlaced := placedAt(now)
	if wasPlaced == isPlaced && from == to {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if wasPlaced {
		if l.counts[from]--; l.counts[from] <= 0 {
			delete(l.counts, from)
		}
	}
	if isPlaced {
		l.counts[to]++
	}
}

// count is the number of VMs placed in loc.
func (l *locationLoad) count(loc placement.Location) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[loc]
}

// placedAt is the location of obj, when it is a placed VM, or the last known state of
// one whose deletion the informer missed.
func placedAt(obj any) (placement.Location, bool) {
	if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	vm, ok := obj.(*banlieuev1.VirtualMachine)
	if !ok || !vm.Status.Scheduled.IsDefined() {
		return placement.Location{}, false
	}
	return locationOf(vm), true
}

func locationOf(vm *banlieuev1.VirtualMachine) placement.Location {
	s := vm.Status.Scheduled
	return placement.Location{ProviderNamespace: s.ProviderNamespace, ProviderName: s.ProviderName, FailureDomain: s.FailureDomain}
}
