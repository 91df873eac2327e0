package providersdk

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
		{"a new label (Cluster API's cluster-name, a watch filter)", machine(newVersion, func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{ClusterNameLabel: "c1"})
		}), true},
		{"a new owner (Cluster API's adoption)", machine(newVersion, func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m1", UID: "u1"}})
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

func TestAClusterUpdateWakesItsMachinesOnlyForWhatTheyActOn(t *testing.T) {
	cluster := func(mods ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		u.SetGeneration(1)
		for _, m := range mods {
			m(u)
		}
		return u
	}
	provisioned := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, true, "status", "initialization", "infrastructureProvisioned")
	}
	for _, tc := range []struct {
		name string
		new  *unstructured.Unstructured
		want bool
	}{
		{"a condition rewritten", cluster(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Available"}}, "status", "conditions")
		}), false},
		{"infrastructure provisioned", cluster(provisioned), true},
		{"spec.paused", cluster(func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		{"the paused annotation", cluster(func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{PausedAnnotation: ""}) }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clusterChangeWakesMachines(event.UpdateEvent{ObjectOld: cluster(), ObjectNew: tc.new}); got != tc.want {
				t.Errorf("clusterChangeWakesMachines = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestACAPIMachineWakesTheInfrastructureMachineItNames(t *testing.T) {
	r := &Reconciler{gvk: schema.GroupVersionKind{Group: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "VSphereMachine"}}
	machine := func(group, kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
			"infrastructureRef": map[string]any{"apiGroup": group, "kind": kind, "name": "web-1"},
		}}}
		u.SetNamespace("team-a")
		return u
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want []reconcile.Request
	}{
		{"its kind", machine("infrastructure.banlieue.io", "VSphereMachine"), []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: "team-a", Name: "web-1"}}}},
		{"another kind of banlieue", machine("infrastructure.banlieue.io", "LibvirtMachine"), nil},
		{"another provider's", machine("infrastructure.cluster.x-k8s.io", "VSphereMachine"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, r.machineOfCAPIMachine(t.Context(), tc.obj)); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTheWatchScopeSelectsByNamespaceAndLabel(t *testing.T) {
	obj := func(ns string, labels map[string]string) client.Object {
		u := &unstructured.Unstructured{}
		u.SetNamespace(ns)
		u.SetLabels(labels)
		return u
	}
	labelled := map[string]string{WatchFilterLabel: "blue"}
	for _, tc := range []struct {
		name              string
		namespace, filter string
		obj               client.Object
		want              bool
	}{
		{"no scope takes all", "", "", obj("a", nil), true},
		{"its namespace", "a", "", obj("a", nil), true},
		{"another namespace", "a", "", obj("b", labelled), false},
		{"the filter's label", "", "blue", obj("b", labelled), true},
		{"no label", "", "blue", obj("b", nil), false},
		{"another filter's value", "", "blue", obj("b", map[string]string{WatchFilterLabel: "green"}), false},
		{"both", "a", "blue", obj("a", labelled), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			WithWatchScope(tc.namespace, tc.filter)(r)
			if got := r.inScope(tc.obj); got != tc.want {
				t.Errorf("inScope = %t, want %t", got, tc.want)
			}
		})
	}
}
