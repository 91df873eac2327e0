package virtualmachine

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
)

// tenantVM creates a VM of class and image that selects f's Providers, as the tenant.
func (f *fixture) tenantVM(name string, class *banlieuev1.VMClass, image *banlieuev1.VMImage, finalizers []string) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := builder.VirtualMachine(f.ns, name, class.Name, image.Name, builder.WithProviderSelector(map[string]string{"suite": f.ns}))
	vm.Finalizers = finalizers
	f.g.Expect(k8s.Create(f.ctx, vm, client.FieldOwner(tenant))).To(Succeed())
	return vm
}

// tenant is the field manager of the tests' creates, so that the API server's record of
// who wrote which field tells the user's create from core's writes (both run in this
// test binary, whose name is their default manager).
const tenant = "tenant"

// finalizerWriters are the managers other than the tenant that own the VM's finalizers.
func finalizerWriters(vm *banlieuev1.VirtualMachine) []string {
	var out []string
	for _, e := range vm.ManagedFields {
		if e.Manager != tenant && e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), `"f:finalizers"`) {
			out = append(out, e.Manager)
		}
	}
	return out
}

// The API server's admission policy (config/admission) puts core's finalizer on a VM in
// the user's own create, so a VM never exists without it and core never writes it: one
// API write per VM fewer. The user's own finalizers stay, and core's is there once.
func TestTheAPIServerGivesANewVMCoresFinalizer(t *testing.T) {
	const core, users = banlieuev1.VirtualMachineFinalizer, "example.com/keep"
	for _, tc := range []struct {
		name       string
		finalizers []string
		want       []string
	}{
		{name: "a VM with no finalizer", want: []string{core}},
		{name: "a VM with a finalizer of its own", finalizers: []string{users}, want: []string{users, core}},
		{name: "a VM that names core's finalizer itself", finalizers: []string{core}, want: []string{core}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			class, image := f.class("c"), f.image("i")
			f.provider("p1", nil)
			vm := f.tenantVM("v", class, image, tc.finalizers)
			f.g.Expect(vm.Finalizers).To(ConsistOf(tc.want), "the finalizers the create answered with")

			vm = f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
				g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
			})
			f.g.Expect(vm.Finalizers).To(ConsistOf(tc.want))
			f.g.Expect(finalizerWriters(vm)).To(BeEmpty(), "the VM's finalizers were written after its create")

			// The policy acts on creation only: core's removal at deletion stands.
			if len(tc.finalizers) > 0 && tc.finalizers[0] == users {
				f.update(vm, func() { vm.Finalizers = []string{core} })
			}
			f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
			f.g.Eventually(func() bool {
				return k8s.Get(f.ctx, clientKey(vm), &banlieuev1.VirtualMachine{}) != nil
			}, 10*time.Second).Should(BeTrue(), "the VM is gone")
		})
	}
}

// A VM without core's finalizer, one created before the policy was installed or where
// the API server does not run it, is given it by core before anything else happens.
func TestCoreAddsTheFinalizerAVMLacks(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	vm := f.tenantVM("v", class, image, nil)
	f.g.Expect(finalizerWriters(vm)).To(BeEmpty())
	// Removed by an update, which the policy does not touch; no Provider is there yet,
	// so the VM waits for a candidate and core has nothing else to write.
	f.update(vm, func() { vm.Finalizers = nil })
	vm = f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Finalizers).To(ConsistOf(banlieuev1.VirtualMachineFinalizer))
	})
	f.g.Expect(finalizerWriters(vm)).NotTo(BeEmpty(), "core wrote the finalizer back")
}
