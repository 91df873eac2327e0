package virtualmachine

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestOnlyProviderIDChanged(t *testing.T) {
	machine := func(providerID, rv string, status map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"powerState": "PoweredOn"}
		if providerID != "" {
			spec["providerID"] = providerID
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		if status != nil {
			u.Object["status"] = status
		}
		u.SetResourceVersion(rv)
		// Writing spec.providerID advances the generation, as any spec write does.
		u.SetGeneration(1)
		if providerID != "" {
			u.SetGeneration(2)
		}
		return u
	}
	ready := map[string]any{"observedGeneration": int64(2)}
	for _, tc := range []struct {
		name     string
		old, new *unstructured.Unstructured
		want     bool
	}{
		{"the providerID written, nothing else", machine("", "1", nil), machine("vsphere://a", "2", nil), true},
		{"the providerID and the status", machine("", "1", nil), machine("vsphere://a", "2", ready), false},
		{"the status only", machine("vsphere://a", "1", nil), machine("vsphere://a", "2", ready), false},
		{"nothing but the resourceVersion", machine("vsphere://a", "1", nil), machine("vsphere://a", "2", nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyProviderIDChanged(tc.old, tc.new); got != tc.want {
				t.Errorf("onlyProviderIDChanged = %t, want %t", got, tc.want)
			}
		})
	}
}
