package providersdk_test

import (
	"context"
	"testing"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// adoptee is a backend with one VM that no machine made, and counts what the SDK asks
// of it. Its Observe reports that VM Unclaimed whatever the machine's state, as a
// careless driver would, so the SDK's own guards are what these tests see.
type adoptee struct {
	creates, deletes, adopts int
	claimed                  bool
}

const adopteeID = "test://adoptee"

func (b *adoptee) client(adopter bool) providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		fns := providersdk.ClientFns{
			ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
				if m.Spec.AdoptProviderID != adopteeID {
					return providersdk.Observation{}, nil
				}
				return providersdk.Observation{Exists: true, UpToDate: true, Unclaimed: !b.claimed, ProviderID: adopteeID, PowerState: banlieuev1.PowerStatePoweredOn}, nil
			},
			CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
				b.creates++
				return providersdk.CreateResult{}, nil
			},
			DeleteFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.DeleteResult, error) {
				b.deletes++
				return providersdk.DeleteResult{}, nil
			},
		}
		if !adopter {
			return fns, nil
		}
		return adoptingClient{ClientFns: fns, b: b}, nil
	})
}

// adoptingClient is a Client that is an Adopter too.
type adoptingClient struct {
	providersdk.ClientFns
	b *adoptee
}

func (adoptingClient) ProviderIDPrefix() string { return "test://" }

func (c adoptingClient) Adopt(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.AdoptResult, error) {
	c.b.adopts++
	c.b.claimed = true
	return providersdk.AdoptResult{}, nil
}

func adopts(id string) func(*testv1.TestMachine) {
	return func(m *testv1.TestMachine) {
		m.Spec.AdoptProviderID = id
		m.Spec.Image = infrav1.MachineImage{}
	}
}

func TestAnAdoptingMachineIsNeverCreated(t *testing.T) {
	for _, tc := range []struct {
		name       string
		id         string
		adopter    bool
		wantReady  ready
		wantAdopts int
	}{
		{name: "an unclaimed VM is adopted once, and the machine is Ready with its provider ID", id: adopteeID, adopter: true,
			wantReady: ready{Status: "True", Reason: infrav1.MachineProvisionedReason}, wantAdopts: 1},
		{name: "a VM that is not there is AdoptionTargetNotFound", id: "test://missing", adopter: true,
			wantReady: ready{Status: "False", Reason: infrav1.MachineAdoptionTargetNotFoundReason}},
		{name: "a driver that cannot adopt says AdoptionTargetInvalid", id: adopteeID,
			wantReady: ready{Status: "False", Reason: infrav1.MachineAdoptionTargetInvalidReason}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			b := &adoptee{}
			r := providersdk.NewReconciler(k8s, testMachineGVK, b.client(tc.adopter), providersdk.WithFinalizer(provider.Finalizer))
			m := e.machine("adopter", adopts(tc.id))
			for range 2 {
				_, _ = e.reconcile(r, m)
			}
			got := e.get(m)
			if r := readyOf(got); r.Status != tc.wantReady.Status || r.Reason != tc.wantReady.Reason {
				t.Errorf("Ready = %+v, want %s, %s", r, tc.wantReady.Status, tc.wantReady.Reason)
			}
			if b.creates != 0 || b.adopts != tc.wantAdopts {
				t.Errorf("creates %d, adopts %d; want 0, %d", b.creates, b.adopts, tc.wantAdopts)
			}
			if tc.wantAdopts > 0 && got.Spec.ProviderID != adopteeID {
				t.Errorf("spec.providerID = %q, want %q", got.Spec.ProviderID, adopteeID)
			}
		})
	}
}

func TestADeletedAdoptingMachineNeverDeletesAVMItDidNotClaim(t *testing.T) {
	e := newEnv(t)
	b := &adoptee{}
	// No Adopter: the VM stays unclaimed.
	r := providersdk.NewReconciler(k8s, testMachineGVK, b.client(false), providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("never-claimed", adopts(adopteeID))
	_, _ = e.reconcile(r, m)
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there: Ready %+v", readyOf(got))
	}
	if b.deletes != 0 {
		t.Errorf("Delete was called %d times for a VM the machine never claimed", b.deletes)
	}
}
