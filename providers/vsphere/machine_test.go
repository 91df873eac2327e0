package vsphere

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// theVM returns the one VM that carries uid, failing unless there is exactly one.
func theVM(t *testing.T, sim *vspheretest.Simulator, uid string) mo.VirtualMachine {
	t.Helper()
	vms, err := sim.VMsWithUID(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 {
		t.Fatalf("%d VMs carry UID %s, want 1", len(vms), uid)
	}
	return vms[0]
}

// created creates m's VM through s, waits for its clone to end and returns the VM.
func created(t *testing.T, sim *vspheretest.Simulator, s *session, m *providersdk.Machine) mo.VirtualMachine {
	t.Helper()
	res, err := afterObserve(s, m, s.Create)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, s, m, res.Task)
	return theVM(t, sim, string(m.UID))
}

// update calls Update after an Observe that finds the VM out of date, and settles its task.
func update(t *testing.T, s *session, m *providersdk.Machine) providersdk.Observation {
	t.Helper()
	o, err := s.Observe(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if o.UpToDate {
		t.Fatalf("VM is up to date before Update: %+v", o)
	}
	res, err := s.Update(context.Background(), m, o)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !res.Task.InFlight() {
		t.Fatalf("Update started no task")
	}
	return settle(t, s, m, res.Task)
}

func TestMachineLifecycle(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())

	const uid = "5b0e7d0e-1c8a-4a52-9a55-0c3c0b1f0a01"
	m := newMachine(uid)
	m.Spec.Hardware = infrav1.MachineHardware{CPUs: 4, MemoryMiB: 4096, Firmware: banlieuev1.FirmwareEFISecure}
	m.Spec.Disks = []infrav1.MachineDisk{
		{Name: "root", SizeGiB: 20, StorageClass: "standard", Target: map[string]string{"datastore": vspheretest.Datastore}},
		{Name: "data", SizeGiB: 5, StorageClass: "standard", Provisioning: banlieuev1.DiskProvisioningThick, Target: map[string]string{"datastore": vspheretest.Datastore}},
	}
	m.Spec.Interfaces = []infrav1.MachineInterface{
		{Name: "eth0", NetworkClass: "dv", Target: map[string]string{"network": vspheretest.PortGroup}},
		{Name: "eth1", NetworkClass: "prod", Target: map[string]string{"network": vspheretest.Network}},
	}
	m.UserData = []byte("#cloud-config\nhostname: web\n")

	var moRef string
	t.Run("before Create, Observe finds no VM", func(t *testing.T) {
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(providersdk.Observation{}, o); diff != "" {
			t.Errorf("Observe (-want +got):\n%s", diff)
		}
	})

	t.Run("Create returns the clone task at once, and the VM has the machine's shape", func(t *testing.T) {
		res, err := afterObserve(s, m, s.Create)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Task.Ref, "task-") || res.Task.Operation != providersdk.OperationClone {
			t.Fatalf("Create task = %+v, want a clone task", res.Task)
		}
		m.UserData = nil // the SDK reads user data only before Create
		o := settle(t, s, m, res.Task)
		vm := theVM(t, sim, uid)
		moRef = vm.Self.Value
		want := providersdk.Observation{
			Exists:          true,
			UpToDate:        true,
			ProviderID:      "vsphere://" + vm.Config.Uuid,
			PowerState:      banlieuev1.PowerStatePoweredOn,
			FailureDomain:   "dc0-dc0-c0",
			Details:         &infrav1.VSphereStatus{MoRef: moRef, InstanceUUID: uid},
			WaitingForGuest: true,
			Hardware:        &providersdk.Hardware{CPUs: 4, MemoryMiB: 4096, DiskBytes: []int64{20 * providersdk.GiB, 5 * providersdk.GiB}},
		}
		// The boot ID is the boot time vcsim set when the clone powered the VM on.
		if bt, err := time.Parse(time.RFC3339Nano, o.BootID); err != nil || time.Since(bt) > time.Minute {
			t.Errorf("boot ID %q is not the recent boot time of the VM", o.BootID)
		}
		want.BootID = o.BootID
		if diff := cmp.Diff(want, o, cmpopts.IgnoreFields(providersdk.Observation{}, "State")); diff != "" {
			t.Errorf("Observe after the clone (-want +got):\n%s", diff)
		}
		if got, ok := o.State.(*vcenter.VM); !ok || got.Ref.Value != moRef {
			t.Errorf("Observe's state is %#v, want the VM %s it read", o.State, moRef)
		}

		if vm.Name != "team-a.web-5b0e7d0e" || vm.Config.InstanceUuid != uid {
			t.Errorf("VM name %q, instance UUID %q; want team-a.web-5b0e7d0e, %s", vm.Name, vm.Config.InstanceUuid, uid)
		}
		if vm.Config.Hardware.NumCPU != 4 || vm.Config.Hardware.MemoryMB != 4096 {
			t.Errorf("VM has %d CPUs and %d MiB, want 4 and 4096", vm.Config.Hardware.NumCPU, vm.Config.Hardware.MemoryMB)
		}
		sizes, thin := vmDisks(vm)
		if diff := cmp.Diff([]int64{20, 5}, sizes); diff != "" {
			t.Errorf("disk sizes in GiB (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]bool{true, false}, thin); diff != "" {
			t.Errorf("thin disks (-want +got):\n%s", diff)
		}
		nics := vmNICs(vm)
		var networks []string
		kinds := make([]string, 0, len(nics))
		for _, n := range nics {
			kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", n), "*types.Virtual"))
			switch b := n.GetVirtualDevice().Backing.(type) {
			case *types.VirtualEthernetCardNetworkBackingInfo:
				networks = append(networks, b.DeviceName)
			case *types.VirtualEthernetCardDistributedVirtualPortBackingInfo:
				networks = append(networks, portGroupName(t, sim, b.Port.PortgroupKey))
			}
		}
		if diff := cmp.Diff([]string{vspheretest.PortGroup, vspheretest.Network}, networks); diff != "" {
			t.Errorf("NIC networks (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Vmxnet3", "Vmxnet3"}, kinds); diff != "" {
			t.Errorf("NIC types (-want +got):\n%s", diff)
		}
		guestinfo := map[string]string{}
		for _, k := range []string{"guestinfo.userdata", "guestinfo.metadata"} {
			if enc := vspheretest.ExtraConfig(vm, k+".encoding"); enc != "base64" {
				t.Errorf("%s.encoding = %q, want base64", k, enc)
			}
			b, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(vm, k))
			if err != nil {
				t.Errorf("%s is not base64: %v", k, err)
			}
			guestinfo[k] = string(b)
		}
		wantInfo := map[string]string{
			"guestinfo.userdata": "#cloud-config\nhostname: web\n",
			"guestinfo.metadata": "instance-id: " + uid + "\nlocal-hostname: web-5b0e7d0e\n",
		}
		if diff := cmp.Diff(wantInfo, guestinfo); diff != "" {
			t.Errorf("guest info (-want +got):\n%s", diff)
		}
		if got := vspheretest.ExtraConfig(vm, ExtraConfigMachineUID); got != uid {
			t.Errorf("extraConfig %s = %q, want %s", ExtraConfigMachineUID, got, uid)
		}
	})

	t.Run("Create on the existing VM succeeds without a second clone", func(t *testing.T) {
		res, err := afterObserve(s, m, s.Create)
		if err != nil || res.Task.InFlight() {
			t.Fatalf("Create = %+v, %v; want no task and no error", res, err)
		}
		theVM(t, sim, uid)
	})

	t.Run("the guest's address is reported once it has one", func(t *testing.T) {
		if err := sim.SetGuestIP(ctx, moRef, "10.0.0.5"); err != nil {
			t.Fatal(err)
		}
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		want := []banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: "10.0.0.5"}}
		if diff := cmp.Diff(want, o.Addresses); diff != "" {
			t.Errorf("addresses (-want +got):\n%s", diff)
		}
		if o.WaitingForGuest {
			t.Error("still waiting for the guest after it reported an address")
		}
	})

	t.Run("powering off without VMware Tools is a hard power off", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		o := updateExpecting(t, s, m, "task-")
		if o.PowerState != banlieuev1.PowerStatePoweredOff || !o.UpToDate {
			t.Errorf("after power off: %s, up to date %v", o.PowerState, o.UpToDate)
		}
	})

	t.Run("resizing CPUs and memory while powered off reconfigures the VM", func(t *testing.T) {
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 2, 3072
		update(t, s, m)
		vm := theVM(t, sim, uid)
		if vm.Config.Hardware.NumCPU != 2 || vm.Config.Hardware.MemoryMB != 3072 {
			t.Errorf("VM has %d CPUs and %d MiB, want 2 and 3072", vm.Config.Hardware.NumCPU, vm.Config.Hardware.MemoryMB)
		}
	})

	t.Run("powering on starts the VM", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		if o := update(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn || !o.UpToDate {
			t.Errorf("after power on: %s, up to date %v", o.PowerState, o.UpToDate)
		}
	})

	t.Run("a disk grows while the VM runs", func(t *testing.T) {
		m.Spec.Disks[0].SizeGiB = 25
		if o := update(t, s, m); !o.UpToDate || o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("after growing: %s, up to date %v", o.PowerState, o.UpToDate)
		}
		if sizes, _ := vmDisks(theVM(t, sim, uid)); !cmp.Equal(sizes, []int64{25, 5}) {
			t.Errorf("disk sizes %v GiB, want [25 5]", sizes)
		}
	})

	t.Run("a CPU change on a running VM without hot-add waits for its next power cycle", func(t *testing.T) {
		m.Spec.Hardware.CPUs = 8
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if !o.UpToDate || !cmp.Equal(o.PendingRestart, []string{"CPUs from 2 to 8"}) {
			t.Fatalf("up to date %v, pending %q; want up to date with the CPUs pending", o.UpToDate, o.PendingRestart)
		}
		if res, err := s.Update(ctx, m, o); err != nil || res.Task.InFlight() {
			t.Fatalf("Update = %+v, %v; want nothing done", res, err)
		}
		if n := theVM(t, sim, uid).Config.Hardware.NumCPU; n != 2 {
			t.Fatalf("the running VM has %d CPUs, want 2 until it is powered off", n)
		}

		// Powered off, the VM takes the change; powered on again, nothing is pending.
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		for _, step := range []string{"power off", "reconfigure"} {
			if o := update(t, s, m); len(o.PendingRestart) > 0 {
				t.Fatalf("after %s: pending %q while the VM is to be off", step, o.PendingRestart)
			}
		}
		if n := theVM(t, sim, uid).Config.Hardware.NumCPU; n != 8 {
			t.Fatalf("the powered-off VM has %d CPUs, want 8", n)
		}
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		if o := update(t, s, m); !o.UpToDate || len(o.PendingRestart) > 0 {
			t.Errorf("after power-on: up to date %v, pending %q", o.UpToDate, o.PendingRestart)
		}
	})

	t.Run("a disk never shrinks", func(t *testing.T) {
		m.Spec.Disks[1].SizeGiB = 1
		defer func() { m.Spec.Disks[1].SizeGiB = 5 }()
		_, err := afterObserve(s, m, s.Update)
		if msg := wantErr(providersdk.IsPermanent, `disk "data" is 5 GiB and cannot shrink to 1 GiB on vSphere`, "")(err); msg != "" {
			t.Fatal(msg)
		}
	})

	t.Run("suspending suspends the VM", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStateSuspended
		if o := update(t, s, m); o.PowerState != banlieuev1.PowerStateSuspended || !o.UpToDate {
			t.Errorf("after suspend: %s, up to date %v", o.PowerState, o.UpToDate)
		}
	})

	t.Run("powering on resumes a suspended VM", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		if o := update(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("after resume: %s", o.PowerState)
		}
	})

	t.Run("powering off with VMware Tools running shuts the guest down", func(t *testing.T) {
		if err := sim.SetToolsRunning(ctx, moRef, true); err != nil {
			t.Fatal(err)
		}
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		o := updateExpecting(t, s, m, shutdownTaskPrefix+moRef)
		if o.PowerState != banlieuev1.PowerStatePoweredOff || !o.UpToDate {
			t.Errorf("after guest shutdown: %s, up to date %v", o.PowerState, o.UpToDate)
		}
	})

	t.Run("Delete powers the VM off, then destroys it", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		update(t, s, m)
		for i, want := range []string{"power off", "destroy"} {
			res, err := afterObserve(s, m, s.Delete)
			if err != nil {
				t.Fatalf("Delete %d: %v", i, err)
			}
			if !res.Task.InFlight() || res.Task.Operation != providersdk.OperationDelete {
				t.Fatalf("Delete %d (%s) task = %+v", i, want, res.Task)
			}
			settle(t, s, m, res.Task)
		}
		o, err := s.Observe(ctx, m)
		if err != nil || o.Exists {
			t.Fatalf("Observe after Delete = %+v, %v; want no VM", o, err)
		}
		if vms, err := sim.VMsWithUID(ctx, uid); err != nil || len(vms) != 0 {
			t.Fatalf("%d VMs left with the machine's UID (%v)", len(vms), err)
		}
	})

	t.Run("Delete of a VM that is gone succeeds without a task", func(t *testing.T) {
		res, err := afterObserve(s, m, s.Delete)
		if err != nil || res.Task.InFlight() {
			t.Fatalf("Delete = %+v, %v; want nothing to do", res, err)
		}
	})
}

// updateExpecting is update, checking that the task's reference starts with prefix.
func updateExpecting(t *testing.T, s *session, m *providersdk.Machine, prefix string) providersdk.Observation {
	t.Helper()
	o, err := s.Observe(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Update(context.Background(), m, o)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !strings.HasPrefix(res.Task.Ref, prefix) {
		t.Fatalf("Update task %q, want one starting with %q", res.Task.Ref, prefix)
	}
	return settle(t, s, m, res.Task)
}

func portGroupName(t *testing.T, sim *vspheretest.Simulator, key string) string {
	t.Helper()
	pg := object.NewDistributedVirtualPortgroup(sim.Client.Client, types.ManagedObjectReference{Type: "DistributedVirtualPortgroup", Value: key})
	name, err := pg.ObjectName(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestASoftShutdownEndsWithItsBootOrItsTimeout asks a guest that ignores the request
// to shut down: the shutdown is in flight while the VM runs that boot, over once the VM
// runs another (a restart's power cycle), and powered off at the timeout.
func TestASoftShutdownEndsWithItsBootOrItsTimeout(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	now := time.Now()
	s := connect(t, sim, NewDriver(WithClock(func() time.Time { return now })))
	m := newMachine("7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f")
	vm := created(t, sim, s, m)
	if err := sim.SetToolsRunning(ctx, vm.Self.Value, true); err != nil {
		t.Fatal(err)
	}
	vspheretest.DelayTask(t, "ShutdownGuest", time.Minute) // the guest ignores the request
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	shutDown := func(t *testing.T) {
		t.Helper()
		up, err := afterObserve(s, m, s.Update)
		if err != nil || !strings.HasPrefix(up.Task.Ref, shutdownTaskPrefix+vm.Self.Value+"/") {
			t.Fatalf("Update = %+v, %v; want a guest shutdown", up, err)
		}
		m.Task = up.Task
		m.Task.StartedAt = now
		o, err := s.Observe(ctx, m)
		if err != nil || o.Task != m.Task {
			t.Fatalf("Observe during the shutdown = task %+v, %v; want the shutdown in flight", o.Task, err)
		}
	}

	t.Run("a new boot ends it", func(t *testing.T) {
		shutDown(t)
		before := m.Task
		v := object.NewVirtualMachine(sim.Client.Client, vm.Self)
		for _, power := range []func(context.Context) (*object.Task, error){v.PowerOff, v.PowerOn} {
			task, err := power(ctx)
			if err == nil {
				err = task.Wait(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		o, err := s.Observe(ctx, m)
		if err != nil || o.Task.InFlight() || o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Fatalf("Observe in the next boot = task %+v, %s, %v; want no task, PoweredOn", o.Task, o.PowerState, err)
		}
		shutDown(t)
		if m.Task.Ref == before.Ref {
			t.Errorf("the next boot's shutdown has the first's task %s", before.Ref)
		}
	})

	t.Run("the timeout powers the VM off", func(t *testing.T) {
		now = now.Add(DefaultShutdownTimeout)
		o, err := s.Observe(ctx, m)
		if err != nil || o.Task.InFlight() || o.UpToDate {
			t.Fatalf("Observe after the timeout = task %+v, up to date %v, %v; want no task and not up to date", o.Task, o.UpToDate, err)
		}
		up, err := s.Update(ctx, m, o)
		if err != nil || !strings.HasPrefix(up.Task.Ref, "task-") {
			t.Fatalf("Update after the timeout = %+v, %v; want a power-off task", up, err)
		}
		if o := settle(t, s, m, up.Task); o.PowerState != banlieuev1.PowerStatePoweredOff {
			t.Fatalf("after the hard power off: %s", o.PowerState)
		}
	})
}

func TestAddresses(t *testing.T) {
	tests := []struct {
		name string
		vm   vcenter.VM
		want []string
	}{
		{"no guest address, none reported", vcenter.VM{}, nil},
		{"the primary address comes first", vcenter.VM{GuestIP: "10.0.0.9", GuestNICs: [][]string{{"10.0.0.8", "10.0.0.9"}}}, []string{"10.0.0.9", "10.0.0.8"}},
		{"link-local addresses are dropped", vcenter.VM{GuestNICs: [][]string{{"fe80::1", "169.254.3.4", "2001:db8::5"}}}, []string{"2001:db8::5"}},
		{"addresses of several NICs are kept, duplicates once", vcenter.VM{GuestNICs: [][]string{{"10.0.0.1"}, {"192.168.1.1", "10.0.0.1"}}}, []string{"10.0.0.1", "192.168.1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range addresses(&tt.vm) {
				if a.Type != banlieuev1.MachineInternalIP {
					t.Errorf("address %s has type %s", a.Address, a.Type)
				}
				got = append(got, a.Address)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVMNamesNeverCollide(t *testing.T) {
	long := strings.Repeat("n", 63)
	tests := []struct {
		name, namespace, machine, want string
	}{
		{"a short name is namespace and name around a dot", "team-a", "web", "team-a.web"},
		{"a dash moved into the namespace gives another name", "team-a-b", "web", "team-a-b.web"},
		{"the other half of that pair", "team-a", "b-web", "team-a.b-web"},
		{"a long name is cut to 80 with a hash", long, strings.Repeat("m", 63), long + ".mmmmm-zdmto2cmmg"},
		{"a long name that differs after the cut gets another hash", long, strings.Repeat("m", 62) + "x", long + ".mmmmm-pkkbeysmdl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vmName(tt.namespace, tt.machine); got != tt.want || len(got) > 80 {
				t.Errorf("vmName(%q, %q) = %q, want %q (at most 80 characters)", tt.namespace, tt.machine, got, tt.want)
			}
		})
	}
}

func TestObserveReportsAFailedTask(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	m := newMachine("3d4e5f60-7a8b-4c9d-8e0f-2a3b4c5d6e7f")
	vm := object.NewVirtualMachine(sim.Client.Client, created(t, sim, s, m).Self)
	task, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{GuestId: "no-such-guest"})
	if err != nil {
		t.Fatal(err)
	}
	_ = task.Wait(ctx)
	m.Task = providersdk.Task{Ref: task.Reference().Value, Operation: providersdk.OperationUpdate}
	_, err = s.Observe(ctx, m)
	var failed *providersdk.TaskFailedError
	if !errors.As(err, &failed) || failed.Task != m.Task || failed.Message == "" {
		t.Fatalf("Observe = %v; want a TaskFailedError for %s with the fault's message", err, m.Task.Ref)
	}
}

// A Destroy_Task can unregister the VM before it has deleted the VM's files (vcsim's
// does). While it runs, Observe reports it in flight though no VM is found, so that the
// machine is not let go under a destroy that has not ended.
func TestADestroyStillRunningIsInFlightOnceItsVMIsGone(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	m := newMachine("8e9f0a1b-2c3d-4e5f-8a6b-7c8d9e0f1a2b")
	ref := created(t, sim, s, m).Self
	m.Deleting = true
	del, err := afterObserve(s, m, s.Delete) // the power off
	if err != nil {
		t.Fatal(err)
	}
	settle(t, s, m, del.Task)

	vspheretest.DelayTask(t, vspheretest.TaskDestroy, 2*time.Second)
	if del, err = afterObserve(s, m, s.Delete); err != nil || !del.Task.InFlight() {
		t.Fatalf("Delete = %+v, %v; want the destroy task", del, err)
	}
	// The window in which the destroy has unregistered the VM and is deleting its files.
	if err := object.NewVirtualMachine(sim.Client.Client, ref).Unregister(ctx); err != nil {
		t.Fatal(err)
	}
	m.Task = del.Task
	o, err := s.Observe(ctx, m)
	if err != nil || o.Exists || o.Task != del.Task {
		t.Fatalf("Observe while the destroy runs = %+v, %v; want no VM and the destroy in flight", o, err)
	}
	if o := settle(t, s, m, del.Task); o.Exists {
		t.Fatalf("Observe once the destroy ended = %+v; want no VM", o)
	}
}

func TestAVMNamedByTheOldSchemeIsStillTheMachines(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	m := newMachine("4e5f607a-8b9c-4d0e-9f1a-3b4c5d6e7f80")
	// VMs made before names were "<namespace>.<name>" are named "<namespace>-<name>".
	ref := created(t, sim, s, m).Self
	task, err := object.NewVirtualMachine(sim.Client.Client, ref).Rename(ctx, m.Namespace+"-"+m.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := s.Observe(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := o.Details.(*infrav1.VSphereStatus); !o.Exists || got == nil || got.MoRef != ref.Value {
		t.Errorf("Observe after the rename = %+v, want the VM %s found by its instance UUID", o, ref.Value)
	}
}

// A machine whose status records its VM's reference is observed with one read of that
// VM, and one whose clone task has just ended with a read of the task and of the VM it
// returned. A reference that is gone, names another VM or that vCenter refuses (the
// status is only a hint, and anyone who can write it is not trusted) sends Observe to
// the search by instance UUID, which finds the machine's own VM.
func TestObserveReadsTheRecordedVMAlone(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	made := func(uid string) (*providersdk.Machine, string, providersdk.Task) {
		m := newMachine(uid)
		res, err := afterObserve(s, m, s.Create)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s, m, res.Task)
		return m, theVM(t, sim, uid).Self.Value, res.Task
	}
	m, mine, clone := made("6c1f8e1f-2d9b-4b63-8b66-1d4d1c2f1b01")
	_, others, othersClone := made("7d2a9f20-2d9b-4b63-8b66-1d4d1c2f1b02")
	search := map[string]float64{"RetrievePropertiesEx": 1, "FindByUuid": 1}
	tests := []struct {
		name  string
		moRef string
		// task is the machine's task as the reconciler hands it: the clone that made
		// the VM, ended, when set.
		task providersdk.Task
		want map[string]float64
	}{
		{name: "none recorded: the search", want: search},
		{name: "none recorded, the clone just ended: its result read", task: clone, want: map[string]float64{"RetrievePropertiesEx": 2}},
		{name: "a task written to name another machine's clone: the search", task: othersClone, want: map[string]float64{"RetrievePropertiesEx": 3, "FindByUuid": 1}},
		{name: "the machine's VM: one read", moRef: mine, want: map[string]float64{"RetrievePropertiesEx": 1}},
		{name: "another machine's VM: the search", moRef: others, want: map[string]float64{"RetrievePropertiesEx": 2, "FindByUuid": 1}},
		{name: "a VM that is gone: the search", moRef: "vm-999999", want: map[string]float64{"RetrievePropertiesEx": 2, "FindByUuid": 1}},
		{name: "a reference vCenter refuses: the search", moRef: "vm-1'><x/>", want: map[string]float64{"RetrievePropertiesEx": 2, "FindByUuid": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := map[string]any{}
			if tt.moRef != "" {
				status[StatusBlock] = map[string]any{"moRef": tt.moRef}
			}
			m.Object.Object["status"] = status
			m.Task = tt.task
			before := backendCalls()
			o, err := s.Observe(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			if d := o.Details.(*infrav1.VSphereStatus); !o.Exists || d.MoRef != mine {
				t.Errorf("Observe found %+v, want the machine's VM %s", o.Details, mine)
			}
			if diff := cmp.Diff(tt.want, callsSince(before)); diff != "" {
				t.Errorf("vCenter calls (-want +got):\n%s", diff)
			}
		})
	}
}
