package virtualmachine

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A Provider made again has no machine kind in its status until its provider publishes
// it: asking for the machines of no kind is an error to retry, not a scheme that panics.
func TestMachinesOfNoKindAreAnError(t *testing.T) {
	r := &Reconciler{kinds: map[schema.GroupVersionKind]*machineKind{}}
	for _, gvk := range []schema.GroupVersionKind{
		{},
		{Group: "infrastructure.banlieue.io", Kind: "TestMachine"},
		{Group: "infrastructure.banlieue.io", Version: "v1alpha1"},
	} {
		if _, err := r.machineKind(context.Background(), gvk); err == nil {
			t.Errorf("%v: no error", gvk)
		}
		if len(r.kinds) != 0 {
			t.Errorf("%v: a kind was kept", gvk)
		}
	}
}
