package providersdk

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/pkg/contract"
)

// writeProviderID patches spec.providerID when the backend reports a new one. It is the
// provider's one write to a machine's spec, made once, right before the status that
// carries the same news.
func (r *Reconciler) writeProviderID(ctx context.Context, s *scope, id string) error {
	u := s.machine.Object
	if id == "" || contract.ProviderID(u) == id {
		return nil
	}
	before := u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, id, "spec", "providerID"); err != nil {
		return fmt.Errorf("failed to set spec.providerID: %w", err)
	}
	if err := r.client.Patch(ctx, u, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("failed to write spec.providerID: %w", err)
	}
	// Writing the spec advanced the generation; the status describes the new one.
	s.machine.Generation = u.GetGeneration()
	return nil
}
