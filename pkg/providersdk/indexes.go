package providersdk

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Field indexes the SDK's controllers read the cache through, instead of listing every
// object of a kind and filtering.
const (
	// MachineProviderField indexes infrastructure machines by the Provider their
	// spec.providerRef names, as "<namespace>/<name>".
	MachineProviderField = "spec.providerRef"
	// ImageClassField indexes VMImages by the provider classes their sources name.
	ImageClassField = "spec.sources.providerClass"
)

// IndexMachines adds the MachineProviderField index on machines of kind gvk to indexer
// (a manager's field indexer).
func IndexMachines(ctx context.Context, indexer client.FieldIndexer, gvk schema.GroupVersionKind) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := indexer.IndexField(ctx, u, MachineProviderField, func(o client.Object) []string {
		if ref, ok := providerOf(o); ok {
			return []string{ref.String()}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to index %s by %s: %w", gvk.Kind, MachineProviderField, err)
	}
	return nil
}

// IndexImages adds the ImageClassField index on VMImages to indexer.
func IndexImages(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &banlieuev1.VMImage{}, ImageClassField, func(o client.Object) []string {
		img, ok := o.(*banlieuev1.VMImage)
		if !ok {
			return nil
		}
		classes := make([]string, 0, len(img.Spec.Sources))
		for _, s := range img.Spec.Sources {
			classes = append(classes, s.ProviderClass)
		}
		return classes
	})
	if err != nil {
		return fmt.Errorf("failed to index VMImages by %s: %w", ImageClassField, err)
	}
	return nil
}

// indexed remembers the indexes added to each manager, so that the controllers of one
// provider, each of which needs an index, add it once: an informer refuses an index
// it already has.
var indexed sync.Map // indexKey -> struct{}

// indexKey names one index of one manager: "<kind>/spec.providerRef", say.
type indexKey struct {
	mgr  ctrl.Manager
	name string
}

// indexOnce adds the index called name to mgr's field indexer through add, unless it was.
func indexOnce(mgr ctrl.Manager, name string, add func(context.Context, client.FieldIndexer) error) error {
	if _, done := indexed.LoadOrStore(indexKey{mgr: mgr, name: name}, struct{}{}); done {
		return nil
	}
	return add(context.Background(), mgr.GetFieldIndexer())
}

// indexMachinesOnce adds the MachineProviderField index on machines of kind gvk to mgr,
// unless it was.
func indexMachinesOnce(mgr ctrl.Manager, gvk schema.GroupVersionKind) error {
	return indexOnce(mgr, gvk.String()+"/"+MachineProviderField, func(ctx context.Context, indexer client.FieldIndexer) error {
		return IndexMachines(ctx, indexer, gvk)
	})
}

// machinesOn lists, from c (a cache that carries the MachineProviderField index), the
// machines of kind gvk whose providerRef names the Provider p.
func machinesOn(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, p client.Object, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts = append(opts, client.MatchingFields{MachineProviderField: client.ObjectKeyFromObject(p).String()})
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", gvk.Kind, err)
	}
	return list.Items, nil
}
