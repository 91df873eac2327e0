package govc_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/mo"

	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/govc"
)

// govc reads what vCenter holds: a VM found by its BIOS UUID, with its hardware, power
// state and extraConfig, and VMs found by name; a UUID no VM has is an error. It leaves
// no session behind.
func TestGovcReadsTheSimulatorsVMs(t *testing.T) {
	sim := vspheretest.Start(t)
	vms, err := sim.VMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(vms, func(vm mo.VirtualMachine) bool { return vm.Name == "DC0_H0_VM0" })
	if i < 0 {
		t.Fatal("the simulator has no VM DC0_H0_VM0")
	}
	want := vms[i]
	g := govc.New(t, sim)

	vm, err := g.VMByUUID(want.Config.Uuid)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Name != want.Name || vm.Config.InstanceUUID != want.Config.InstanceUuid || vm.Config.Hardware.NumCPU != want.Config.Hardware.NumCPU ||
		vm.Config.Hardware.MemoryMB != int64(want.Config.Hardware.MemoryMB) || vm.Runtime.PowerState != string(want.Runtime.PowerState) {
		t.Errorf("govc read %+v, want the VM govmomi reads: %s %s, %d CPUs, %d MB, %s", vm, want.Name, want.Config.InstanceUuid,
			want.Config.Hardware.NumCPU, want.Config.Hardware.MemoryMB, want.Runtime.PowerState)
	}
	if got := vm.DisksGiB(); !slices.Equal(got, []int64{10}) {
		t.Errorf("disks %v GiB, want [10]", got)
	}
	if got := vm.ExtraConfig("govcsim"); got != "TRUE" {
		t.Errorf("extraConfig govcsim = %q, want TRUE", got)
	}

	if _, err := g.VMByUUID("00000000-0000-4000-8000-000000000000"); err == nil || !strings.Contains(err.Error(), "no such VM") {
		t.Errorf("a UUID no VM has: %v, want govc's 'no such VM'", err)
	}
	if paths, err := g.VMsNamed(want.Name); err != nil || !slices.Equal(paths, []string{"/DC0/vm/" + want.Name}) {
		t.Errorf("VMs named %s: %v, %v", want.Name, paths, err)
	}
	if paths, err := g.VMsNamed("no-such-vm"); err != nil || len(paths) != 0 {
		t.Errorf("VMs named no-such-vm: %v, %v, want none", paths, err)
	}
	// Every command logged out: govc leaves no session behind in vCenter.
	if n, err := sim.Sessions(context.Background()); err != nil || n != 0 {
		t.Errorf("sessions left in the simulator: %d, %v; want none", n, err)
	}
}
