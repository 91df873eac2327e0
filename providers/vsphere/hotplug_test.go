package vsphere

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

func TestARunningVMWithHotAddGrowsWithoutARestart(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) {
		p.Spec.Parameters[providersdk.ParamHotplug] = "cpu,memory"
	})
	const uid = "7c1d2e3f-1c8a-4a52-9a55-0c3c0b1f0a02"
	m := newMachine(uid)
	vm := created(t, sim, s, m)
	// vcsim's clone takes only CPUs, memory, UUIDs and extraConfig from the clone's
	// configuration (vcenter's cloneConfig test checks that hot-add is in it): the
	// hot-add a real vCenter gives the clone is set here through vCenter's API.
	task, err := object.NewVirtualMachine(sim.Client.Client, vm.Self).Reconfigure(ctx, types.VirtualMachineConfigSpec{
		CpuHotAddEnabled: types.NewBool(true), MemoryHotAddEnabled: types.NewBool(true)})
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Observe(ctx, m)
	if err != nil {
		t.Fatal(err)
	}

	// More CPUs and memory are made at once, in the same boot; nothing waits.
	m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 4096
	o, err := s.Observe(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if o.UpToDate || len(o.PendingRestart) > 0 {
		t.Fatalf("up to date %v, pending %q; want a change to make now", o.UpToDate, o.PendingRestart)
	}
	if o = update(t, s, m); !o.UpToDate || len(o.PendingRestart) > 0 || o.BootID != first.BootID {
		t.Errorf("after the update: up to date %v, pending %q, boot %q (was %q); want up to date in the same boot", o.UpToDate, o.PendingRestart, o.BootID, first.BootID)
	}
	if hw := theVM(t, sim, uid).Config.Hardware; hw.NumCPU != 4 || hw.MemoryMB != 4096 {
		t.Errorf("the running VM has %d CPUs and %d MiB, want 4 and 4096", hw.NumCPU, hw.MemoryMB)
	}

	// Fewer CPUs still wait for the next power cycle: hot-add adds only.
	m.Spec.Hardware.CPUs = 2
	if o, err = s.Observe(ctx, m); err != nil {
		t.Fatal(err)
	}
	if !o.UpToDate || !cmp.Equal(o.PendingRestart, []string{"CPUs from 4 to 2"}) {
		t.Errorf("up to date %v, pending %q; want the decrease pending", o.UpToDate, o.PendingRestart)
	}
}

func TestAHotplugParameterOfNeitherCPUNorMemoryKeepsTheProviderFromReady(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters[providersdk.ParamHotplug] = "cpus" })
	_, err := s.Inventory(context.Background())
	if want := `parameters.hotplug "cpus": "cpus" is neither cpu nor memory; list what may grow while a VM runs, e.g. cpu,memory, in the Provider`; err == nil || err.Error() != want {
		t.Errorf("Inventory error %v, want %q", err, want)
	}
}
