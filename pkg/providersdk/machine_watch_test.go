package providersdk

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestAMachineUpdateWakesItsReconcilerOnlyForWhatItActsOn(t *testing.T) {
	// machine is a machine at generation 2, changed by mods.
	machine := func(mods ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"spec":   map[string]any{"powerState": "PoweredOn"},
			"status": map[string]any{"observedGeneration": int64(2)},
		}}
		u.SetGeneration(2)
		u.SetResourceVersion("10")
		for _, m := range mods {
			m(u)
		}
		return u
	}
	newVersion := func(u *unstructured.Unstructured) { u.SetResourceVersion("11") }
	nextGeneration := func(u *unstructured.Unstructured) { u.SetGeneration(3) }
	withProviderID := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "vsphere://4211", "spec", "providerID")
	}
	for _, tc := range []struct {
		name string
		new  *unstructured.Unstructured
		want bool
	}{
		{"its own status write", machine(newVersion, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Cloning", "status", "phase")
		}), false},
		{"its own finalizer", machine(newVersion, func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"x/y"}) }), false},
		{"its own spec.providerID write", machine(newVersion, nextGeneration, withProviderID), false},
		{"a spec change (core's apply)", machine(newVersion, nextGeneration, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "PoweredOff", "spec", "powerState")
		}), true},
		{"the providerID with a spec change", machine(newVersion, nextGeneration, withProviderID, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "PoweredOff", "spec", "powerState")
		}), true},
		{"a new annotation (pause)", machine(newVersion, func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{PausedAnnotation: ""})
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := machineChanged().Update(event.UpdateEvent{ObjectOld: machine(), ObjectNew: tc.new})
			if got != tc.want {
				t.Errorf("machineChanged = %t, want %t", got, tc.want)
			}
		})
	}
}
