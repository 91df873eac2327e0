package faults

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/event"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/devenv"
)

// bigClassName is the class a VM is resized to while it runs.
const bigClassName = "faults-big"

// resizeAndRestartUnderKills resizes a running vSphere VM to a class with more CPUs,
// which the simulated vCenter's VMs cannot take while they run (no CPU hot-add), so the
// VM stays Ready and says RestartRequired; then it asks for one restart while processes
// are killed. vCenter's own event history must show exactly one more power-on of the
// VM, and the VM must then have the new CPUs and nothing pending.
func (r *rig) resizeAndRestartUnderKills(t *testing.T) {
	g := NewWithT(t)
	var vm *banlieuev1.VirtualMachine
	for _, v := range r.vmsOn(g, vsphereProv) {
		if v.Status.ObservedPowerState == banlieuev1.PowerStatePoweredOn && desired(&v) == banlieuev1.PowerStatePoweredOn {
			vm = &v
			break
		}
	}
	if vm == nil {
		t.Fatalf("no running VM on %s to resize", vsphereProv)
	}
	g.Expect(r.c.Create(r.ctx, devenv.Class(bigClassName, 2, 256))).To(Succeed())
	r.updateVM(g, vm.Name, func(vm *banlieuev1.VirtualMachine) { vm.Spec.ClassRef.Name = bigClassName })
	g.Eventually(func(g Gomega) {
		got := r.vm(g, vm.Name)
		g.Expect(conditionOf(got.Status.Conditions, banlieuev1.VirtualMachineRestartRequiredCondition)).To(HavePrefix("True/HardwareChangePending: the VM's next restart applies CPUs from 1 to 2"))
		g.Expect(conditionOf(got.Status.Conditions, banlieuev1.ReadyCondition)).To(HavePrefix("True/"))
	}).WithTimeout(truthTimeout).WithPolling(time.Second).Should(Succeed())
	ref := r.vsphereRef(t, vm.Status.ProviderID)
	powerOns := r.vspherePowerOns(t, ref)

	at := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	r.updateVM(g, vm.Name, func(vm *banlieuev1.VirtualMachine) { vm.Spec.RestartRequestedAt = &at })
	const rounds = 2
	r.killRounds(t, rounds)
	start := time.Now()
	g.Eventually(func(g Gomega) {
		got := r.vm(g, vm.Name)
		g.Expect(got.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted), "the restart has not ended: %+v", got.Status.Restart)
		g.Expect(conditionOf(got.Status.Conditions, banlieuev1.VirtualMachineRestartRequiredCondition)).To(Equal("False/NoPendingChange: "))
	}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(Succeed())
	r.requireRunning(t)
	took, inv := r.converge(t)
	if n := r.vspherePowerOns(t, ref) - powerOns; n != 1 {
		t.Errorf("vCenter powered VM %s on %d times for one restart, want once", vm.Name, n)
	}
	var mvm mo.VirtualMachine
	g.Expect(object.NewVirtualMachine(r.backends.VSphere.OwnClient().Client, ref).Properties(r.ctx, ref, []string{"config.hardware.numCPU"}, &mvm)).To(Succeed())
	g.Expect(mvm.Config.Hardware.NumCPU).To(BeEquivalentTo(2), "the restart did not apply the pending CPUs")
	r.record("resize and restart", fmt.Sprintf("a running vSphere VM resized (RestartRequired), then restarted during %d kill rounds: one power-on", rounds), time.Since(start)+took, inv)
}

// vm reads one VM of the fleet.
func (r *rig) vm(g Gomega, name string) *banlieuev1.VirtualMachine {
	for _, vm := range r.vms(g) {
		if vm.Name == name {
			return &vm
		}
	}
	g.Expect(name).To(BeEmpty(), "VM %s is gone", name)
	return nil
}

// vsphereRef is the simulated vCenter's VM that a vsphere://<BIOS UUID> providerID names.
func (r *rig) vsphereRef(t *testing.T, providerID string) types.ManagedObjectReference {
	t.Helper()
	uuid := providerID[len("vsphere://"):]
	ref, err := object.NewSearchIndex(r.backends.VSphere.OwnClient().Client).FindByUuid(r.ctx, nil, uuid, true, nil)
	if err != nil || ref == nil {
		t.Fatalf("no vSphere VM has BIOS UUID %s (%v)", uuid, err)
	}
	return ref.Reference()
}

// vspherePowerOns counts the VmPoweredOnEvents in the simulated vCenter's event
// history for a VM: its own record of each start, which banlieue did not write.
func (r *rig) vspherePowerOns(t *testing.T, ref types.ManagedObjectReference) int {
	t.Helper()
	events, err := event.NewManager(r.backends.VSphere.OwnClient().Client).QueryEvents(r.ctx, types.EventFilterSpec{
		Entity:      &types.EventFilterSpecByEntity{Entity: ref, Recursion: types.EventFilterSpecRecursionOptionSelf},
		EventTypeId: []string{"VmPoweredOnEvent"},
	})
	if err != nil {
		t.Fatalf("failed to read vCenter's events: %v", err)
	}
	return len(events)
}
