package vsphere

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/providersdk/drivertest"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// TestConformance runs the SDK's conformance kit against vcsim, reading the simulated
// vCenter with govmomi itself, not through the driver.
func TestConformance(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	unreachable := providerFor(sim)
	unreachable.Spec.Connection.Endpoint = "https://127.0.0.1:1/sdk" // a closed loopback port
	wrong := infoFor(sim, providerFor(sim))
	wrong.Credentials = map[string][]byte{UsernameKey: []byte("user"), PasswordKey: []byte("not-the-password")}
	drivertest.Run(t, drivertest.Backend{
		Driver:       NewDriver(),
		Provider:     infoFor(sim, providerFor(sim)),
		Unreachable:  infoFor(sim, unreachable),
		Unauthorized: &wrong,
		NewMachine:   func(*testing.T) *providersdk.Machine { return newMachine(string(uuid.NewUUID())) },
		MissingImage: func(m *providersdk.Machine) { m.Spec.Image.Ref = "no-such-template" },
		Count: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			vms, err := sim.VMsWithUID(ctx, string(m.UID))
			if err != nil {
				t.Fatal(err)
			}
			return len(vms)
		},
		Disks: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			vms, err := sim.VMsWithUID(ctx, string(m.UID))
			if err != nil || len(vms) != 1 {
				t.Fatalf("%d VMs of machine %s (%v), want 1", len(vms), m.UID, err)
			}
			sizes, _ := vmDisks(vms[0])
			return len(sizes)
		},
		Snapshot: func(t *testing.T) string {
			t.Helper()
			vms, err := sim.VMs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]string, 0, len(vms))
			for _, vm := range vms {
				d := vm.Self.Value + " " + vm.Name + " " + string(vm.Runtime.PowerState)
				if c := vm.Config; c != nil {
					d += fmt.Sprintf(" %s %d %d %d devices %s", c.InstanceUuid, c.Hardware.NumCPU, c.Hardware.MemoryMB, len(c.Hardware.Device),
						vspheretest.ExtraConfig(vm, ExtraConfigMachineUID))
				}
				out = append(out, d)
			}
			slices.Sort(out)
			return strings.Join(out, "; ")
		},
		Released: func(t *testing.T, m *providersdk.Machine, before providersdk.Observation) error {
			t.Helper()
			return releasedVM(t, sim, m, before)
		},
		// A VM of someone else's that carries the machine's instance UUID, the key the
		// driver finds VMs by, but another machine's UID.
		Impostor: func(t *testing.T, m *providersdk.Machine) func() bool {
			t.Helper()
			tmpl := object.NewVirtualMachine(sim.Client.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: sim.TemplateRef})
			pool, vmFolder := impostorPlace(t, sim)
			spec := types.VirtualMachineCloneSpec{
				Location: types.VirtualMachineRelocateSpec{Pool: &pool},
				Config: &types.VirtualMachineConfigSpec{InstanceUuid: string(m.UID), ExtraConfig: []types.BaseOptionValue{
					&types.OptionValue{Key: ExtraConfigMachineUID, Value: "0aa0aa0a-0000-4000-8000-000000000000"},
				}},
			}
			task, err := tmpl.Clone(ctx, object.NewFolder(sim.Client.Client, vmFolder), "impostor-"+string(m.UID)[:8], spec)
			if err == nil {
				err = task.Wait(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := fmt.Sprint(impostor(t, sim, string(m.UID)))
			return func() bool { return fmt.Sprint(impostor(t, sim, string(m.UID))) == before && before != "[]" }
		},
	})
}

// impostorPlace is where the conformance kit's impostor VM goes: the resource pool of
// the machines' cluster and the datacenter's VM folder, as govmomi finds them.
func impostorPlace(t *testing.T, sim *vspheretest.Simulator) (pool, folder types.ManagedObjectReference) {
	t.Helper()
	ctx := context.Background()
	finder := find.NewFinder(sim.Client.Client)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	finder.SetDatacenter(dc)
	cluster, err := finder.ClusterComputeResource(ctx, "DC0_C0")
	if err != nil {
		t.Fatal(err)
	}
	rp, err := cluster.ResourcePool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := finder.DefaultFolder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rp.Reference(), f.Reference()
}

// impostor describes the VMs that carry uid: their names, power and UID keys.
func impostor(t *testing.T, sim *vspheretest.Simulator, uid string) []string {
	t.Helper()
	vms, err := sim.VMsWithUID(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(vms))
	for _, vm := range vms {
		out = append(out, vm.Name+" "+string(vm.Runtime.PowerState)+" "+vspheretest.ExtraConfig(vm, ExtraConfigMachineUID))
	}
	return out
}

// releasedVM checks, with govmomi, the VM a Release let go: still there under the
// machine's instance UUID, in the power state and with the disks Observe reported
// before, without the machine's UID in extraConfig. It destroys the VM when the test
// ends.
func releasedVM(t *testing.T, sim *vspheretest.Simulator, m *providersdk.Machine, before providersdk.Observation) error {
	t.Helper()
	ctx := context.Background()
	vms, err := sim.VMsWithUID(ctx, string(m.UID))
	if err != nil {
		return err
	}
	if len(vms) != 1 {
		return fmt.Errorf("%d VMs have the machine's instance UUID, want the one released", len(vms))
	}
	vm := vms[0]
	t.Cleanup(func() {
		o := object.NewVirtualMachine(sim.Client.Client, vm.Self)
		if task, err := o.PowerOff(ctx); err == nil {
			_ = task.Wait(ctx)
		}
		if task, err := o.Destroy(ctx); err == nil {
			_ = task.Wait(ctx)
		}
	})
	was, _ := before.State.(*vcenter.VM)
	disks := 0
	for _, d := range vm.Config.Hardware.Device {
		if _, ok := d.(*types.VirtualDisk); ok {
			disks++
		}
	}
	switch {
	case was == nil:
		return fmt.Errorf("the observation before the release holds no VM: %+v", before)
	case vm.Self.Value != was.Ref.Value:
		return fmt.Errorf("VM %s has the machine's instance UUID, not %s, the one released", vm.Self.Value, was.Ref.Value)
	case powerState(vcenter.PowerState(vm.Runtime.PowerState)) != before.PowerState:
		return fmt.Errorf("the VM is %s, was %s", vm.Runtime.PowerState, before.PowerState)
	case disks != len(was.DiskBytes):
		return fmt.Errorf("the VM has %d disks, had %d", disks, len(was.DiskBytes))
	case vspheretest.ExtraConfig(vm, ExtraConfigMachineUID) != "":
		return fmt.Errorf("the VM still carries %s=%s", ExtraConfigMachineUID, vspheretest.ExtraConfig(vm, ExtraConfigMachineUID))
	}
	return nil
}
