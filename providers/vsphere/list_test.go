package vsphere

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// unmanagedFromSim is what ListVMs should report of vm, read with govmomi from what
// vCenter holds, at location.
func unmanagedFromSim(vm mo.VirtualMachine, location string) providersdk.UnmanagedVM {
	// vmDisks reads whole GiB; the simulator's disks are.
	sizes, _ := vmDisks(vm)
	disks := make([]int64, 0, len(sizes))
	for _, s := range sizes {
		disks = append(disks, s*providersdk.GiB)
	}
	fw := banlieuev1.Firmware(vm.Config.Firmware)
	if fw == banlieuev1.FirmwareEFI && vm.Config.BootOptions != nil && vm.Config.BootOptions.EfiSecureBootEnabled != nil && *vm.Config.BootOptions.EfiSecureBootEnabled {
		fw = banlieuev1.FirmwareEFISecure
	}
	return providersdk.UnmanagedVM{
		ProviderID: providerIDPrefix + vm.Config.Uuid,
		Name:       vm.Name,
		Location:   location,
		PowerState: powerState(vcenter.PowerState(vm.Runtime.PowerState)),
		Hardware:   providersdk.Hardware{CPUs: vm.Config.Hardware.NumCPU, MemoryMiB: int64(vm.Config.Hardware.MemoryMB), DiskBytes: disks},
		Firmware:   fw,
	}
}

// reconfigureVM applies spec to the VM with govmomi, as a person would.
func reconfigureVM(t *testing.T, sim *vspheretest.Simulator, ref types.ManagedObjectReference, spec types.VirtualMachineConfigSpec) {
	t.Helper()
	ctx := context.Background()
	task, err := object.NewVirtualMachine(sim.Client.Client, ref).Reconfigure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// moveToFolder makes the folder name in the datacenter's VM folder and moves the VMs
// into it.
func moveToFolder(t *testing.T, sim *vspheretest.Simulator, name string, vms ...types.ManagedObjectReference) {
	t.Helper()
	ctx := context.Background()
	root, err := object.NewSearchIndex(sim.Client.Client).FindByInventoryPath(ctx, "/"+vspheretest.Datacenter+"/vm")
	if err != nil || root == nil {
		t.Fatalf("VM folder: %v", err)
	}
	folder, err := root.(*object.Folder).CreateFolder(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	task, err := folder.MoveInto(ctx, vms)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func sortedByName(vms []providersdk.UnmanagedVM) []providersdk.UnmanagedVM {
	sort.Slice(vms, func(i, j int) bool { return vms[i].Name < vms[j].Name })
	return vms
}

func TestListVMs(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())

	// One of govmomi's model VMs gets another shape and UEFI with Secure Boot, and is
	// powered off; another is adopted by a machine, and a third made by one.
	reshaped := simVM(t, sim, hostVM1)
	reconfigureVM(t, sim, reshaped.Self, types.VirtualMachineConfigSpec{
		NumCPUs: 4, MemoryMB: 3072, Firmware: string(types.GuestOsDescriptorFirmwareTypeEfi),
		BootOptions: &types.VirtualMachineBootOptions{EfiSecureBootEnabled: types.NewBool(true)},
	})
	if task, err := object.NewVirtualMachine(sim.Client.Client, reshaped.Self).PowerOff(ctx); err != nil {
		t.Fatal(err)
	} else if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	adopted := simVM(t, sim, clusterVM0)
	if _, err := reconcileAdoption(ctx, s, adoptingMachine("ad0be000-0000-4000-8000-000000000001", adopted.Config.Uuid)); err != nil {
		t.Fatalf("adoption: %v", err)
	}
	created := newMachine("c2eaed00-0000-4000-8000-000000000001")
	res, err := afterObserve(s, created, s.Create)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, s, created, res.Task)

	all, err := sim.VMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]providersdk.UnmanagedVM, 0, len(all))
	var templates int
	for _, vm := range all {
		switch {
		case vm.Config.Template:
			templates++
			continue
		case vspheretest.ExtraConfig(vm, ExtraConfigMachineUID) != "":
			continue
		}
		want = append(want, unmanagedFromSim(vm, "/"+vspheretest.Datacenter+"/vm"))
	}
	if templates == 0 || len(want) != len(all)-templates-2 {
		t.Fatalf("the simulator has %d VMs, %d templates, %d unmarked VMs; want a template and two marked VMs", len(all), templates, len(want))
	}

	t.Run("the unmarked VMs that are no templates, with their shape", func(t *testing.T) {
		got, err := s.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sortedByName(want), sortedByName(got)); diff != "" {
			t.Errorf("ListVMs (-want +got):\n%s", diff)
		}
		for _, vm := range got {
			if vm.Name == hostVM1 {
				w := providersdk.UnmanagedVM{
					ProviderID: providerIDPrefix + reshaped.Config.Uuid, Name: hostVM1, Location: "/DC0/vm",
					PowerState: banlieuev1.PowerStatePoweredOff, Firmware: banlieuev1.FirmwareEFISecure,
					Hardware: providersdk.Hardware{CPUs: 4, MemoryMiB: 3072, DiskBytes: []int64{10 * providersdk.GiB}},
				}
				if diff := cmp.Diff(w, vm); diff != "" {
					t.Errorf("the reshaped VM (-want +got):\n%s", diff)
				}
			}
		}
	})

	t.Run("the Provider's datacenter and folder bound the list", func(t *testing.T) {
		moveToFolder(t, sim, "legacy", reshaped.Self)
		inFolder := "/" + vspheretest.Datacenter + "/vm/legacy"
		wantInFolder, wantAll := []providersdk.UnmanagedVM{}, make([]providersdk.UnmanagedVM, 0, len(want))
		for _, w := range want {
			if w.Name == hostVM1 {
				w.Location = inFolder
				wantInFolder = append(wantInFolder, w)
			}
			wantAll = append(wantAll, w)
		}
		for _, tc := range []struct {
			name   string
			params map[string]string
			want   []providersdk.UnmanagedVM
		}{
			{name: "no scope: every datacenter", want: wantAll},
			{name: "its datacenter by name", params: map[string]string{"datacenter": vspheretest.Datacenter}, want: wantAll},
			{name: "its datacenter by path", params: map[string]string{"datacenter": "/" + vspheretest.Datacenter}, want: wantAll},
			{name: "another datacenter", params: map[string]string{"datacenter": "DC9"}, want: []providersdk.UnmanagedVM{}},
			{name: "a folder relative to the VM folder", params: map[string]string{"folder": "legacy"}, want: wantInFolder},
			{name: "an absolute folder", params: map[string]string{"folder": inFolder}, want: wantInFolder},
			{name: "a folder with no VM", params: map[string]string{"folder": "empty"}, want: []providersdk.UnmanagedVM{}},
			{name: "a folder whose name starts another's", params: map[string]string{"folder": "leg"}, want: []providersdk.UnmanagedVM{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				scoped := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) {
					for k, v := range tc.params {
						p.Spec.Parameters[k] = v
					}
				})
				got, err := scoped.ListVMs(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(sortedByName(tc.want), sortedByName(got)); diff != "" {
					t.Errorf("ListVMs (-want +got):\n%s", diff)
				}
			})
		}
	})
}
