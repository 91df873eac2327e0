package providersdk_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// shardOf registers, in the env's namespace, the test class's shard with selector.
func (e *env) shardOf(selector string) *providersdk.Shard {
	e.t.Helper()
	s, err := providersdk.NewShard(provider.ProviderClass, selector, e.ns)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.Register(e.ctx, k8s, k8s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func TestAProviderShardServesTheProvidersItsSelectorMatchesAndNoneTwoShardsMatch(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Labels = map[string]string{"site": "dc1"} })
	dc1, dc2 := e.shardOf("site=dc1"), e.shardOf("site=dc2")
	reconcilerOf := func(s *providersdk.Shard) *providersdk.ProviderReconciler {
		return providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK, providersdk.NewSessions(provider.NewDriver(), k8s),
			time.Minute, providersdk.WithMachineReader(machineCache), providersdk.WithProviderShard(s))
	}
	backend := provider.NewDriver()
	machineReconcilerOf := func(s *providersdk.Shard) *providersdk.Reconciler {
		return provider.NewReconciler(k8s, backend, providersdk.WithShard(s))
	}
	m := e.machine("web")

	// The other shard leaves the Provider and its machine as they are: no finalizer, no
	// status.
	before := e.getProvider().ResourceVersion
	e.reconcileProvider(reconcilerOf(dc2))
	e.mustReconcile(machineReconcilerOf(dc2), m)
	if got := e.getProvider(); got.ResourceVersion != before {
		t.Errorf("a shard whose selector does not match the Provider wrote it: %+v", got.Status.Conditions)
	}
	if got := e.get(m); len(got.Finalizers) != 0 || got.Status.Conditions != nil {
		t.Errorf("a shard whose selector does not match the Provider touched its machine: finalizers %v, conditions %v", got.Finalizers, got.Status.Conditions)
	}

	// Its own shard serves it.
	e.reconcileProvider(reconcilerOf(dc1))
	if got := conditionsOf(e.getProvider())[banlieuev1.ReadyCondition]; got != "True/Ready: " {
		t.Errorf("Ready = %q, want True", got)
	}
	e.mustReconcile(machineReconcilerOf(dc1), m)
	if got := e.get(m); got.Spec.ProviderID == "" {
		t.Error("the Provider's own shard did not make the machine's VM")
	}

	// A shard of every Provider of the class starts: two shards match it, and neither
	// acts on it or its machines until one no longer runs.
	e.shardOf("")
	e.reconcileProvider(reconcilerOf(dc1))
	want := "False/ShardConflict: the Provider is matched by provider shards " + providersdk.ShardLeaseName(provider.ProviderClass, "site=dc1") +
		" (site=dc1) and " + providersdk.ShardLeaseName(provider.ProviderClass, "") + " (every Provider of the class); none acts on it, nor on its machines, " +
		"until one of their --provider-selector no longer matches its labels"
	if diff := cmp.Diff(want, conditionsOf(e.getProvider())[banlieuev1.ReadyCondition]); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	e.update(m, func(m *testv1.TestMachine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff })
	rv := e.get(m).ResourceVersion
	e.mustReconcile(machineReconcilerOf(dc1), m)
	if got := e.get(m); got.ResourceVersion != rv {
		t.Error("a shard acted on a machine of a Provider two shards match")
	}

	// The shard of every Provider stops: its Lease is no longer renewed.
	lease := &coordinationv1.Lease{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: providersdk.ShardLeaseName(provider.ProviderClass, "")}, lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}
	if err := k8s.Update(e.ctx, lease); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(reconcilerOf(dc1))
	if got := conditionsOf(e.getProvider())[banlieuev1.ReadyCondition]; got != "True/Ready: " {
		t.Errorf("Ready = %q once the other shard stopped, want True", got)
	}
	e.mustReconcile(machineReconcilerOf(dc1), m)
	if got := e.get(m); got.Status.PowerState != banlieuev1.PowerStatePoweredOff {
		t.Errorf("the machine is %s once the other shard stopped, want PoweredOff", got.Status.PowerState)
	}
}

func TestAProviderSelectorThatDoesNotParseIsRefused(t *testing.T) {
	if _, err := providersdk.NewShard(provider.ProviderClass, "site in dc1", "banlieue-system"); err == nil {
		t.Error("NewShard took a selector that does not parse")
	}
}
