package faults

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
)

// retainedVM is a VM deleted under deletionPolicy Retain: its backend VM must outlive
// it, as it was, without banlieue's marks.
type retainedVM struct {
	name, providerID string
	power            banlieuev1.PowerState
}

// retainOnePerSimulator lets one VM of each simulated backend go at the fleet's
// deletion (deletionPolicy Retain): the first VM on the simulated vCenter, and a VM
// made for it on the Proxmox VE Provider, which the Provider's deletion emptied
// (libvirt's run the real guest and blank disks, which the fleet's deletion removes).
// It returns them as they are once they run.
func (r *rig) retainOnePerSimulator(t *testing.T) []retainedVM {
	t.Helper()
	g := NewWithT(t)
	on := r.vmsOn(g, vsphereProv)
	if len(on) == 0 {
		t.Fatalf("no VM on %s to retain", vsphereProv)
	}
	r.updateVM(g, on[0].Name, func(vm *banlieuev1.VirtualMachine) { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	pve := r.newVM(r.size.VMs)
	pve.Name = "vm-retained-pve"
	pve.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn
	pve.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain
	pve.Spec.Placement.ProviderSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"backend": proxmox.ProviderClass}}
	g.Expect(r.c.Create(r.ctx, pve)).To(Succeed())

	out := make([]retainedVM, 0, 2)
	for _, name := range []string{on[0].Name, pve.Name} {
		var got retainedVM
		g.Eventually(func(g Gomega) {
			vm := r.vm(g, name)
			g.Expect(vm.Status.Phase).To(BeElementOf(banlieuev1.PhaseRunning, banlieuev1.PhaseStopped), "VM %s has not converged", name)
			g.Expect(vm.Status.ProviderID).NotTo(BeEmpty(), "VM %s has no providerID", name)
			got = retainedVM{name: name, providerID: vm.Status.ProviderID, power: vm.Status.ObservedPowerState}
		}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(Succeed())
		out = append(out, got)
	}
	return out
}

// checkRetained checks, with each backend's own API, that every retained VM is still
// there, in the power state it had, and carries none of banlieue's marks; it returns
// their IDs as the inventory names them, which it then leaves out.
func (r *rig) checkRetained(t *testing.T, vms []retainedVM) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, want := range vms {
		var (
			id    string
			power banlieuev1.PowerState
			marks []string
		)
		switch {
		case strings.HasPrefix(want.providerID, "vsphere://"):
			id, power, marks = r.vsphereVMByUUID(t, strings.TrimPrefix(want.providerID, "vsphere://"))
		case strings.HasPrefix(want.providerID, "proxmox://"):
			id, power, marks = r.proxmoxVMByID(t, want.providerID)
		default:
			t.Fatalf("retained VM %s has a providerID of no simulated backend: %s", want.name, want.providerID)
		}
		switch {
		case id == "":
			t.Errorf("retained VM %s (%s) is gone from its backend", want.name, want.providerID)
		case power != want.power:
			t.Errorf("retained VM %s (%s) is %s, was %s", want.name, want.providerID, power, want.power)
		case len(marks) > 0:
			t.Errorf("retained VM %s (%s) still carries banlieue's marks: %s", want.name, want.providerID, strings.Join(marks, ", "))
		}
		ids[id] = true
	}
	return ids
}

// vsphereVMByUUID finds the simulated vCenter's VM with a BIOS UUID, as the inventory
// names it; "" when there is none.
func (r *rig) vsphereVMByUUID(t *testing.T, uuid string) (id string, power banlieuev1.PowerState, marks []string) {
	t.Helper()
	c := r.backends.VSphere.OwnClient().Client
	ref, err := object.NewSearchIndex(c).FindByUuid(r.ctx, nil, uuid, true, nil)
	if err != nil {
		t.Fatalf("failed to find vSphere VM %s: %v", uuid, err)
	}
	if ref == nil {
		return "", "", nil
	}
	var vm mo.VirtualMachine
	if err := object.NewVirtualMachine(c, ref.Reference()).Properties(r.ctx, ref.Reference(), []string{"name", "config.extraConfig", "runtime.powerState"}, &vm); err != nil {
		t.Fatalf("failed to read vSphere VM %s: %v", uuid, err)
	}
	var extra []types.BaseOptionValue
	if vm.Config != nil {
		extra = vm.Config.ExtraConfig
	}
	for _, o := range extra {
		if ov := o.GetOptionValue(); ov.Key == vsphere.ExtraConfigMachineUID || strings.HasPrefix(ov.Key, "banlieue.") {
			marks = append(marks, fmt.Sprintf("extraConfig %s=%v", ov.Key, ov.Value))
		}
	}
	power = banlieuev1.PowerStatePoweredOff
	switch vm.Runtime.PowerState {
	case types.VirtualMachinePowerStatePoweredOn:
		power = banlieuev1.PowerStatePoweredOn
	case types.VirtualMachinePowerStateSuspended:
		power = banlieuev1.PowerStateSuspended
	}
	return vm.Reference().Value + " (" + vm.Name + ")", power, marks
}

// proxmoxVMByID finds the simulated cluster's VM that a proxmox://<cluster>/<vmid>
// providerID names, as the inventory names it; "" when there is none.
func (r *rig) proxmoxVMByID(t *testing.T, providerID string) (id string, power banlieuev1.PowerState, marks []string) {
	t.Helper()
	vmid, err := strconv.Atoi(providerID[strings.LastIndex(providerID, "/")+1:])
	if err != nil {
		t.Fatalf("providerID %s names no VMID: %v", providerID, err)
	}
	for _, vm := range r.backends.Proxmox.VMs() {
		if vm.VMID != vmid {
			continue
		}
		for _, tag := range strings.FieldsFunc(vm.Config["tags"], func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if strings.HasPrefix(tag, proxmox.TagPrefix) {
				marks = append(marks, "tag "+tag)
			}
		}
		if strings.Contains(vm.Config["description"], proxmox.DescriptionUIDKey) {
			marks = append(marks, "description "+proxmox.DescriptionUIDKey)
		}
		power = banlieuev1.PowerStatePoweredOff
		switch vm.QMPStatus {
		case "running":
			power = banlieuev1.PowerStatePoweredOn
		case "paused":
			power = banlieuev1.PowerStateSuspended
		}
		return strconv.Itoa(vm.VMID) + " (" + vm.Name + ")", power, marks
	}
	return "", "", nil
}
