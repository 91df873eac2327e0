package virtualmachine

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/placement"
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
			if !vm.Status.Scheduled.IsDefined() {
				return unscheduled
			}
			return locationOf(vm).ProviderKey()
		},
		indexLocation: func(vm *banlieuev1.VirtualMachine) string {
			if !vm.Status.Scheduled.IsDefined() {
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
