package providersdk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// tasksInFlight reads banlieue_backend_tasks_in_flight for class from controller-runtime's
// registry, as the metrics endpoint serves it; found is false when there is no series.
func tasksInFlight(t *testing.T, class string) (value float64, found bool) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != "banlieue_backend_tasks_in_flight" {
			continue
		}
		for _, m := range fam.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "class" && l[0].GetValue() == class {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestTasksInFlightCountsMachinesWithATaskUntilTheirFinalizerGoes(t *testing.T) {
	class := fmt.Sprintf("metrics-%d", time.Now().UnixNano())
	e := newEnv(t, func(p *banlieuev1.Provider) {
		p.Spec.ProviderClassRef.Name = class
		p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"}
	})
	r := provider.NewReconciler(k8s, provider.NewDriver(), providersdk.WithClass(class))
	type state struct {
		Value float64
		Found bool
	}
	expect := func(step string, want float64) {
		t.Helper()
		v, found := tasksInFlight(t, class)
		if diff := cmp.Diff(state{want, true}, state{v, found}); diff != "" {
			t.Errorf("%s: tasks in flight (-want +got):\n%s", step, diff)
		}
	}
	expect("before any reconcile", 0)

	slow, gone := e.machine("slow"), e.machine("gone")
	e.mustReconcile(r, slow)
	e.mustReconcile(r, gone)
	expect("two clones in flight", 2)
	e.mustReconcile(r, slow)
	expect("a clone polled again", 2)

	// The machine deleted while its clone runs keeps counting: its task is still polled.
	if err := k8s.Delete(e.ctx, gone); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, gone)
	expect("a deleted machine whose clone runs", 2)

	p := e.provider.DeepCopy()
	p.Spec.Parameters = nil
	if err := k8s.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, slow)
	if got := e.get(slow); got.Status.Task.IsDefined() {
		t.Fatalf("status.task = %+v once the clone is done", got.Status.Task)
	}
	expect("one clone done", 1)
	e.mustReconcile(r, gone)
	if got := e.get(gone); got != nil {
		t.Fatalf("the deleted machine is still there with finalizers %v", got.Finalizers)
	}
	expect("the deleted machine's finalizer removed", 0)
	e.mustReconcile(r, gone)
	expect("a reconcile of the gone machine", 0)
}

func TestTheClassDefaultsToTheMachineKind(t *testing.T) {
	provider.NewReconciler(k8s, provider.NewDriver())
	if _, found := tasksInFlight(t, provider.ProviderClass); !found {
		t.Errorf("no banlieue_backend_tasks_in_flight series for class %q, derived from kind %s", provider.ProviderClass, provider.MachineKind.Kind)
	}
}

// providerConditionSeries reads banlieue_provider_condition for the Provider ns/name
// from controller-runtime's registry: "type/reason" → value.
func providerConditionSeries(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, fam := range families {
		if fam.GetName() != "banlieue_provider_condition" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["name"] == name && labels["class"] == provider.ProviderClass {
				got[labels["type"]+"/"+labels["reason"]] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

func TestProviderConditionsFollowTheProviderUntilItIsGone(t *testing.T) {
	e := newEnv(t)
	r := newProviderReconciler(backendWith(nil, nil))
	expect := func(step string, want map[string]float64) {
		t.Helper()
		if diff := cmp.Diff(want, providerConditionSeries(t, e.ns, e.provider.Name)); diff != "" {
			t.Errorf("%s: banlieue_provider_condition (-want +got):\n%s", step, diff)
		}
	}
	e.reconcileProvider(r)
	expect("healthy", map[string]float64{"Ready/Ready": 1, "BackendReachable/Reachable": 1, "CredentialsValid/Valid": 1})

	p := e.getProvider()
	p.Spec.Paused = ptr.To(true)
	if err := k8s.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	// Pausing rewrites Ready only; the series of the old reason goes with it.
	expect("paused", map[string]float64{"Ready/Paused": 0, "BackendReachable/Reachable": 1, "CredentialsValid/Valid": 1})

	if err := k8s.Delete(e.ctx, e.getProvider()); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	expect("deleted", map[string]float64{})
}
