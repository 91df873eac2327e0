package virtualmachine

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/test/provider"
)

// The tests of section 4 of docs/proposals/20261204-day-2-operations.md as core sees it:
// an adopting VM is placed on the one Provider that owns its backend VM and lets VMs
// adopt, its machine takes the VM over as it is, and every other case says why.

// adoptionEnabled lets the Provider's VMs be adopted and publishes the test provider's
// prefix, as its provider controller does.
func adoptionEnabled(p *banlieuev1.Provider) {
	p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled
	p.Status.ProviderIDPrefix = provider.ProviderIDPrefix
}

// adopting makes the VM adopt the backend VM id, with no image.
func adopting(id string) func(*banlieuev1.VirtualMachine) {
	return func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.AdoptProviderID = id
		vm.Spec.ImageRef = banlieuev1.LocalObjectReference{}
		vm.Spec.MigrationPolicy = banlieuev1.MigrationPolicyNever
	}
}

func TestAnAdoptedVMIsTakenOverAsItIsWithoutACreate(t *testing.T) {
	f := newFixture(t)
	class := f.class("c")
	f.provider("p1", nil, adoptionEnabled)
	id := backend.AddUnmanaged(f.ns, 2)
	creates := backend.Creates()

	f.vm("v", class, &banlieuev1.VMImage{}, adopting(id))
	vm := f.running("v")

	f.g.Expect(vm.Status.ProviderID).To(Equal(id))
	f.g.Expect(vm.Status.Hardware.CPUs).To(Equal(int32(2)), "the VM's hardware as its provider observes it")
	f.g.Expect(vm.Status.Scheduled.ProviderName).To(Equal("p1"))
	f.g.Expect(condition(vm, banlieuev1.VirtualMachineScheduledCondition).Message).To(Equal("placed on Provider " + f.ns + "/p1, which owns the adopted VM " + id))
	m := f.machine("v")
	f.g.Expect(m.Spec.AdoptProviderID).To(Equal(id))
	f.g.Expect(m.Spec.Image).To(Equal(infrav1.MachineImage{}), "an adopted VM came from no image")
	f.g.Expect(backend.Creates()).To(Equal(creates), "adoption created a VM")
	_, stillUnmanaged := backend.Unmanaged(id)
	f.g.Expect(stillUnmanaged).To(BeFalse())
	got, ok := backend.VM(m.UID)
	f.g.Expect(ok).To(BeTrue())
	f.g.Expect(got.Starts).To(Equal(1), "adoption restarted the VM")
	f.g.Expect(got.PowerOffs).To(Equal(0))
	f.g.Eventually(func(g Gomega) {
		e, ok := f.events(g, "v")[banlieuev1.VirtualMachineAdoptedReason]
		g.Expect(ok).To(BeTrue(), "no Adopted Event")
		g.Expect(e.Note).To(Equal("Took over backend VM " + id + " on Provider " + f.ns + "/p1 as it was: no clone, no restart"))
	}, 10*time.Second).Should(Succeed())
}

func TestAnAdoptionThatCannotBePlacedSaysWhy(t *testing.T) {
	tests := []struct {
		name string
		// providers are the fixture's Providers, by name, with their mods.
		providers map[string][]func(*banlieuev1.Provider)
		// id is the adoptProviderID; "" adopts an unmanaged VM of the backend.
		id         string
		wantReason string
		wantInMsg  []string
	}{
		{
			name:       "A Provider whose adoptionPolicy is Disabled is no candidate.",
			providers:  map[string][]func(*banlieuev1.Provider){"p1": {func(p *banlieuev1.Provider) { p.Status.ProviderIDPrefix = provider.ProviderIDPrefix }}},
			wantReason: banlieuev1.VirtualMachineAdoptionNoProviderReason,
			wantInMsg:  []string{"adoptionPolicy is not Enabled"},
		},
		{
			name:       "A Provider whose VMs have another prefix is no candidate.",
			providers:  map[string][]func(*banlieuev1.Provider){"p1": {adoptionEnabled}},
			id:         "vsphere://4214a4ef-0000-0000-0000-000000000001",
			wantReason: banlieuev1.VirtualMachineAdoptionNoProviderReason,
			wantInMsg:  []string{"provider IDs start with test://"},
		},
		{
			name:       "A Provider that cannot adopt is no candidate.",
			providers:  map[string][]func(*banlieuev1.Provider){"p1": {func(p *banlieuev1.Provider) { p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled }}},
			wantReason: banlieuev1.VirtualMachineAdoptionNoProviderReason,
			wantInMsg:  []string{"cannot adopt VMs"},
		},
		{
			name:       "Two Providers that could each adopt the VM are ambiguous.",
			providers:  map[string][]func(*banlieuev1.Provider){"p1": {adoptionEnabled}, "p2": {adoptionEnabled}},
			wantReason: banlieuev1.VirtualMachineAdoptionAmbiguousReason,
			wantInMsg:  []string{"/p1", "/p2", "providerSelector"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			class := f.class("c")
			for name, mods := range tt.providers {
				f.provider(name, nil, mods...)
			}
			id := tt.id
			if id == "" {
				id = backend.AddUnmanaged(f.ns, 2)
			}
			f.vm("v", class, &banlieuev1.VMImage{}, adopting(id))
			f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
				c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(tt.wantReason))
				for _, s := range tt.wantInMsg {
					g.Expect(c.Message).To(ContainSubstring(s))
				}
			})
			f.g.Expect(f.machine("v")).To(BeNil())
		})
	}
}

func TestTwoVMsOfANamespaceCannotAdoptOneBackendVM(t *testing.T) {
	f := newFixture(t)
	class := f.class("c")
	f.provider("p1", nil, adoptionEnabled)
	id := backend.AddUnmanaged(f.ns, 2)
	f.vm("first", class, &banlieuev1.VMImage{}, adopting(id))
	f.running("first")
	f.vm("second", class, &banlieuev1.VMImage{}, adopting(id))
	f.eventuallyVM("second", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineAdoptionConflictReason))
		g.Expect(c.Message).To(ContainSubstring("VirtualMachine first adopts " + id))
	})
}

func TestTwoNamespacesAdoptingOneBackendVMHaveOneWinner(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	classA, classB := a.class("c"), b.class("c")
	// One Provider both namespaces' VMs select; the backend's claim decides.
	p := a.provider("p1", nil, adoptionEnabled)
	id := backend.AddUnmanaged(a.ns, 2)
	for _, f := range []*fixture{a, b} {
		class := classA
		if f == b {
			class = classB
		}
		f.vm("v", class, &banlieuev1.VMImage{}, adopting(id), func(vm *banlieuev1.VirtualMachine) {
			vm.Spec.Placement.ProviderSelector.MatchLabels = map[string]string{"suite": a.ns, "name": p.Name}
		})
	}
	var winners, losers int
	for _, f := range []*fixture{a, b} {
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			ready := condition(vm, banlieuev1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status == metav1.ConditionTrue || strings.Contains(ready.Message, "managed by another machine")).To(BeTrue(),
				"neither adopted nor refused: %v", vm.Status.Conditions)
		})
		if vm := f.eventuallyVM("v", func(Gomega, *banlieuev1.VirtualMachine) {}); vm.Status.ProviderID == id {
			winners++
		} else {
			losers++
			f.g.Expect(metaReady(f.machine("v")).Reason).To(Equal(infrav1.MachineAlreadyManagedReason))
		}
	}
	a.g.Expect([]int{winners, losers}).To(Equal([]int{1, 1}))
}

func TestAnAdoptionOfAVMThatDoesNotExistNeverCreatesOne(t *testing.T) {
	f := newFixture(t)
	class := f.class("c")
	f.provider("p1", nil, adoptionEnabled)
	creates := backend.Creates()
	f.vm("v", class, &banlieuev1.VMImage{}, adopting(provider.ProviderIDPrefix+"no-such-vm"))
	f.g.Eventually(func(g Gomega) {
		m := f.machine("v")
		g.Expect(m).NotTo(BeNil())
		c := metaReady(m)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.MachineAdoptionTargetNotFoundReason))
	}, 20*time.Second).Should(Succeed())
	f.g.Consistently(backend.Creates, time.Second).Should(Equal(creates))
}
