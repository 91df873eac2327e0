package providersdk

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestAProviderUpdateWakesItsMachinesOnlyForWhatTheyActOn(t *testing.T) {
	// provider is a checked, healthy Provider, changed by mods.
	provider := func(mods ...func(*banlieuev1.Provider)) *banlieuev1.Provider {
		p := &banlieuev1.Provider{
			ObjectMeta: metav1.ObjectMeta{Name: "p1", Generation: 1, Annotations: map[string]string{"team": "infra"}},
			Status: banlieuev1.ProviderStatus{
				FailureDomains: []banlieuev1.FailureDomain{{Name: "rack-a"}},
				Conditions: []metav1.Condition{
					{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: banlieuev1.ProviderReadyReason},
					{Type: banlieuev1.ProviderBackendReachableCondition, Status: metav1.ConditionTrue, Reason: banlieuev1.ProviderBackendReachableReason},
					{Type: banlieuev1.ProviderCredentialsValidCondition, Status: metav1.ConditionTrue, Reason: banlieuev1.ProviderCredentialsValidReason},
				},
			},
		}
		for _, m := range mods {
			m(p)
		}
		return p
	}
	condition := func(t string, status metav1.ConditionStatus, reason, message string) func(*banlieuev1.Provider) {
		return func(p *banlieuev1.Provider) {
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: message})
		}
	}
	inventoryFailed := condition(banlieuev1.ReadyCondition, metav1.ConditionFalse, banlieuev1.ProviderInventoryFailedReason, "property collector timed out")
	tests := []struct {
		name     string
		old, new *banlieuev1.Provider
		want     bool
	}{{
		name: "nothing changed (a resync)",
		old:  provider(), new: provider(),
	}, {
		name: "the periodic check found another failure domain",
		old:  provider(),
		new: provider(func(p *banlieuev1.Provider) {
			p.Status.FailureDomains = append(p.Status.FailureDomains, banlieuev1.FailureDomain{Name: "rack-b"})
			p.Status.FailureDomainSummary = "rack-a, rack-b"
		}),
	}, {
		name: "a condition's message changed, not its status",
		old:  provider(inventoryFailed),
		new:  provider(condition(banlieuev1.ReadyCondition, metav1.ConditionFalse, banlieuev1.ProviderInventoryFailedReason, "the user may not read dc1")),
	}, {
		name: "a finalizer was added",
		old:  provider(),
		new:  provider(func(p *banlieuev1.Provider) { p.Finalizers = []string{ProviderFinalizer} }),
	}, {
		name: "the spec changed (paused)",
		old:  provider(),
		new:  provider(func(p *banlieuev1.Provider) { p.Spec.Paused, p.Generation = ptr.To(true), 2 }),
		want: true,
	}, {
		name: "the deletion started",
		old:  provider(),
		new:  provider(func(p *banlieuev1.Provider) { p.DeletionTimestamp = &metav1.Time{} }),
		want: true,
	}, {
		name: "an annotation was added",
		old:  provider(),
		new:  provider(func(p *banlieuev1.Provider) { p.Annotations["note"] = "x" }),
		want: true,
	}, {
		name: "a label changed, which may move it to another provider shard",
		old:  provider(),
		new:  provider(func(p *banlieuev1.Provider) { p.Labels = map[string]string{"site": "dc2"} }),
		want: true,
	}, {
		name: "the backend became unreachable",
		old:  provider(),
		new:  provider(condition(banlieuev1.ProviderBackendReachableCondition, metav1.ConditionFalse, banlieuev1.ProviderBackendUnreachableReason, "connection refused")),
		want: true,
	}, {
		name: "the credentials were rejected",
		old:  provider(),
		new:  provider(condition(banlieuev1.ProviderCredentialsValidCondition, metav1.ConditionFalse, banlieuev1.ProviderCredentialsRejectedReason, "password rejected")),
		want: true,
	}, {
		name: "Ready came back, so machines backing off retry now",
		old:  provider(inventoryFailed),
		new:  provider(),
		want: true,
	}, {
		name: "the first check wrote the conditions",
		old:  provider(func(p *banlieuev1.Provider) { p.Status.Conditions = nil }),
		new:  provider(),
		want: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := providerChangeWakesMachines(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
				t.Errorf("wakes the machines = %t, want %t", got, tt.want)
			}
		})
	}
}
