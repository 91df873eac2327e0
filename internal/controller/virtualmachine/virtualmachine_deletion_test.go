package virtualmachine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// releasing lets the test provider release the VMs of the Provider it is given to.
func releasing(p *banlieuev1.Provider) {
	p.Spec.Parameters = map[string]string{testv1.ReleaseParameter: "true"}
}

// gone waits until the VM is gone.
func (f *fixture) gone(vm *banlieuev1.VirtualMachine) {
	f.t.Helper()
	f.g.Eventually(func() bool {
		return k8s.Get(f.ctx, clientKey(vm), &banlieuev1.VirtualMachine{}) != nil
	}, 10*time.Second).Should(BeTrue(), "the VM is still there")
}

func TestDeletionPolicyIsCopiedToTheMachine(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image)
	f.running("v")
	f.g.Expect(f.machine("v").Spec.DeletionPolicy).To(Equal(banlieuev1.DeletionPolicyDelete), "the default is copied")
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	f.g.Eventually(func() banlieuev1.DeletionPolicy { return f.machine("v").Spec.DeletionPolicy }, 10*time.Second).
		Should(Equal(banlieuev1.DeletionPolicyRetain))
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyDelete })
	f.g.Eventually(func() banlieuev1.DeletionPolicy { return f.machine("v").Spec.DeletionPolicy }, 10*time.Second).
		Should(Equal(banlieuev1.DeletionPolicyDelete))
}

func TestRetainSetJustBeforeDeletionReleasesTheBackendVM(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil, releasing)
	vm := f.vm("v", class, image)
	providerID := f.running("v").Status.ProviderID
	uid := f.machine("v").UID
	// Held, so that the machine can be seen deleted with the policy it was given.
	m := f.machine("v")
	f.update(m, func() { m.Annotations = map[string]string{testv1.HoldDeletionAnnotation: ""} })
	// Retain, and the deletion at once: core may see only the deletion.
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		m := f.machine("v")
		g.Expect(m.DeletionTimestamp).NotTo(BeNil())
		g.Expect(m.Spec.DeletionPolicy).To(Equal(banlieuev1.DeletionPolicyRetain))
		c := metaReady(m)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.MachineReleasingReason))
	}, 10*time.Second).Should(Succeed())
	f.update(m, func() { delete(m.Annotations, testv1.HoldDeletionAnnotation) })
	f.gone(vm)
	f.g.Expect(f.machine("v")).To(BeNil())
	got, ok := backend.VM(uid)
	f.g.Expect(ok).To(BeTrue(), "the backend VM was deleted")
	f.g.Expect(got.Released).To(BeTrue())
	f.g.Expect(got.PowerState).To(Equal(banlieuev1.PowerStatePoweredOn))
	f.g.Eventually(func(g Gomega) {
		e, ok := f.events(g, "v")[banlieuev1.VirtualMachineReleasedReason]
		g.Expect(ok).To(BeTrue(), "no Released Event")
		g.Expect(e.Note).To(Equal("backend VM " + providerID + " left running; banlieue no longer manages it"))
	}, 10*time.Second).Should(Succeed())
}

func TestRetainOnAProviderThatCannotReleaseKeepsTheVMUntilDelete(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	f.running("v")
	uid := f.machine("v").UID
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseDeleting))
		c := condition(vm, banlieuev1.ReadyCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineRetainNotSupportedReason))
		g.Expect(condition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition).Reason).To(Equal(infrav1.MachineRetainNotSupportedReason))
	})
	f.g.Expect(f.machine("v").Finalizers).NotTo(BeEmpty())
	_, ok := backend.VM(uid)
	f.g.Expect(ok).To(BeTrue(), "the backend VM was deleted against deletionPolicy Retain")

	// Delete unblocks it, through the machine's policy.
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyDelete })
	f.gone(vm)
	_, ok = backend.VM(uid)
	f.g.Expect(ok).To(BeFalse(), "the backend VM is still there")
}

func TestAMigrationDeletesTheOldBackendVMEvenUnderRetain(t *testing.T) {
	f, vm := onOldOfTwoProviders(t, banlieuev1.MigrationPolicyAutomatic)
	f.running("v")
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	f.g.Eventually(func() banlieuev1.DeletionPolicy { return f.machine("v").Spec.DeletionPolicy }, 10*time.Second).
		Should(Equal(banlieuev1.DeletionPolicyRetain))
	old := f.machine("v").UID
	moveToNew(f, vm)
	f.scheduledOn("v", "new", "")
	f.running("v")
	_, ok := backend.VM(old)
	f.g.Expect(ok).To(BeFalse(), "the old backend VM is still there")
	f.g.Expect(f.machine("v").Spec.DeletionPolicy).To(Equal(banlieuev1.DeletionPolicyRetain), "the new machine has the VM's policy")
}

// metaReady is the machine's Ready condition; nil when it has none.
func metaReady(m *testv1.TestMachine) *metav1.Condition {
	return meta.FindStatusCondition(m.Status.Conditions, banlieuev1.ReadyCondition)
}
