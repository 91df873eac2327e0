package proxmox

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// ignoreState leaves out Observation.State, the driver's own record, from comparisons.
var ignoreState = cmpopts.IgnoreFields(providersdk.Observation{}, "State")

// theVM returns the one VM that is not a template, failing unless there is exactly one.
func theVM(t *testing.T, sim *proxmoxtest.Simulator) proxmoxsim.VMState {
	t.Helper()
	var out []proxmoxsim.VMState
	for _, vm := range sim.VMs() {
		if !vm.Template {
			out = append(out, vm)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d VMs besides templates, want 1: %+v", len(out), out)
	}
	return out[0]
}

// pick returns the values of keys in conf, "" for a missing one.
func pick(conf map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = conf[k]
	}
	return out
}

// sizes are the sizes of a config's disks in bus order.
func sizes(conf map[string]string) []int64 {
	keys := pve.Config(conf).DiskKeys()
	out := make([]int64, 0, len(keys))
	for _, k := range keys {
		out = append(out, pve.DiskGiB(conf[k]))
	}
	return out
}

func TestMachineLifecycle(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.Bridges = []string{"vmbr0", "vmbr1"}
		o.GuestAgentDelay = 300 * time.Millisecond
	})
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim))

	const uid = "5b0e7d0e-1c8a-4a52-9a55-0c3c0b1f0a01"
	m := newMachine(uid)
	m.Spec.Hardware = infrav1.MachineHardware{CPUs: 4, MemoryMiB: 4096, Firmware: banlieuev1.FirmwareEFISecure}
	m.Spec.Disks = []infrav1.MachineDisk{
		{Name: "root", SizeGiB: 20, StorageClass: "fast", Target: map[string]string{"storage": proxmoxtest.Storage}},
		{Name: "data", SizeGiB: 5, StorageClass: "fast", Target: map[string]string{"storage": proxmoxtest.Storage}},
	}
	m.Spec.Interfaces = []infrav1.MachineInterface{
		{Name: "eth0", NetworkClass: "prod", Target: map[string]string{"bridge": "vmbr1"},
			IPAM: &banlieuev1.IPAM{Source: banlieuev1.IPAMSourceStatic, Static: banlieuev1.StaticIPAM{
				Addresses: []string{"10.1.2.3/24"}, Gateway: "10.1.2.1", Nameservers: []string{"10.1.0.53"}}}},
		{Name: "eth1", NetworkClass: "prod", Target: map[string]string{"bridge": "vmbr0"}},
	}
	userData := "#cloud-config\nhostname: web\n"
	m.UserData = []byte(userData)

	t.Run("before Create, Observe finds no VM", func(t *testing.T) {
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(providersdk.Observation{}, o, ignoreState); diff != "" {
			t.Errorf("Observe (-want +got):\n%s", diff)
		}
	})

	var vmid int
	t.Run("Create returns the clone's UPID, and the VM ends shaped by the machine and running", func(t *testing.T) {
		task, err := observeCreate(t, s, m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(task.Ref, "UPID:pve1:") || !strings.Contains(task.Ref, ":qmclone:") || task.Operation != providersdk.OperationClone {
			t.Fatalf("Create task = %+v, want a qmclone UPID", task)
		}
		setTask(m, task)
		m.UserData = nil // the SDK reads user data only before Create
		o := converge(t, s, m)
		vm := theVM(t, sim)
		vmid = vm.VMID
		want := providersdk.Observation{
			Exists: true, UpToDate: true,
			ProviderID:      "proxmox://banlieue/" + strconv.Itoa(vmid),
			PowerState:      banlieuev1.PowerStatePoweredOn,
			FailureDomain:   proxmoxtest.Node1,
			Details:         &infrav1.ProxmoxStatus{Node: proxmoxtest.Node1, VMID: int32(vmid)},
			WaitingForGuest: true,
			Hardware:        &providersdk.Hardware{CPUs: 4, MemoryMiB: 4096, DiskBytes: []int64{20 * providersdk.GiB, 5 * providersdk.GiB}},
		}
		// The boot ID is the running QEMU's PID on its node, from status/current.
		if !regexp.MustCompile(`^pve1/qemu-[1-9][0-9]*$`).MatchString(o.BootID) {
			t.Errorf("boot ID %q, want pve1/qemu-<pid>", o.BootID)
		}
		want.BootID = o.BootID
		if diff := cmp.Diff(want, o, ignoreState); diff != "" {
			t.Errorf("Observe after converging (-want +got):\n%s", diff)
		}
		snippet := "local:snippets/banlieue-" + uid + ".yaml"
		wantConf := map[string]string{
			"name": "team-a-web-5b0e7d0e-m3lxueminf", "cores": "4", "memory": "4096", "bios": "ovmf", "machine": "q35",
			"cicustom": "user=" + snippet, "ipconfig0": "ip=10.1.2.3/24,gw=10.1.2.1", "ipconfig1": "ip=dhcp",
			"nameserver": "10.1.0.53", "tags": "banlieue-" + uid,
		}
		if diff := cmp.Diff(wantConf, pick(vm.Config, "name", "cores", "memory", "bios", "machine", "cicustom", "ipconfig0", "ipconfig1", "nameserver", "tags")); diff != "" {
			t.Errorf("VM config (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{20, 5}, sizes(vm.Config)); diff != "" {
			t.Errorf("disk sizes in GiB (-want +got):\n%s", diff)
		}
		for _, k := range []string{"scsi0", "scsi1", "efidisk0"} {
			if !strings.HasPrefix(vm.Config[k], proxmoxtest.Storage+":") {
				t.Errorf("%s = %q, want a volume on %s", k, vm.Config[k], proxmoxtest.Storage)
			}
		}
		if !strings.Contains(vm.Config["efidisk0"], "pre-enrolled-keys=1") {
			t.Errorf("efidisk0 = %q, want Secure Boot keys pre-enrolled", vm.Config["efidisk0"])
		}
		bridges := []string{pve.ParseProperty(vm.Config["net0"]).Opts["bridge"], pve.ParseProperty(vm.Config["net1"]).Opts["bridge"]}
		if diff := cmp.Diff([]string{"vmbr1", "vmbr0"}, bridges); diff != "" {
			t.Errorf("NIC bridges (-want +got):\n%s", diff)
		}
		if got := descriptionUID(vm.Config["description"]); got != uid {
			t.Errorf("description names UID %q, want %s:\n%s", got, uid, vm.Config["description"])
		}
		if got, _ := sim.Volume(proxmoxtest.Node1, snippet); string(got) != userData {
			t.Errorf("snippet %s = %q, want the user data %q", snippet, got, userData)
		}
		if vm.Status != "running" {
			t.Errorf("VM is %s, want running", vm.Status)
		}
	})

	t.Run("Create on the existing VM succeeds without a second clone", func(t *testing.T) {
		o, err := s.Observe(ctx, m)
		if err != nil || !o.Exists {
			t.Fatalf("Observe = %+v, %v; want the VM", o, err)
		}
		res, err := s.Create(ctx, m, o)
		if err != nil || res.Task.InFlight() {
			t.Fatalf("Create = %+v, %v; want no task and no error", res, err)
		}
		theVM(t, sim)
	})

	t.Run("the guest agent's addresses appear once it runs", func(t *testing.T) {
		time.Sleep(300 * time.Millisecond)
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if o.WaitingForGuest || len(o.Addresses) == 0 || o.Addresses[0].Address != "10.1.2.3" {
			t.Errorf("addresses %+v (waiting %v), want 10.1.2.3 first", o.Addresses, o.WaitingForGuest)
		}
	})

	for _, step := range []struct {
		name   string
		power  banlieuev1.PowerState
		status string
	}{
		{"suspending pauses the running VM", banlieuev1.PowerStateSuspended, "paused"},
		{"powering on resumes the paused VM", banlieuev1.PowerStatePoweredOn, "running"},
		{"powering off shuts the VM down", banlieuev1.PowerStatePoweredOff, "stopped"},
		{"suspending a stopped VM starts it, then pauses it", banlieuev1.PowerStateSuspended, "paused"},
		{"powering off a paused VM stops it", banlieuev1.PowerStatePoweredOff, "stopped"},
	} {
		t.Run(step.name, func(t *testing.T) {
			m.Spec.PowerState = step.power
			o := converge(t, s, m)
			if o.PowerState != step.power {
				t.Errorf("power state %s, want %s", o.PowerState, step.power)
			}
			if vm := theVM(t, sim); vm.QMPStatus != step.status {
				t.Errorf("VM is %s, want %s", vm.QMPStatus, step.status)
			}
		})
	}

	t.Run("a stopped VM gets more CPUs, memory and a larger disk", func(t *testing.T) {
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 8, 8192
		m.Spec.Disks[0].SizeGiB = 30
		converge(t, s, m)
		vm := theVM(t, sim)
		if diff := cmp.Diff(map[string]string{"cores": "8", "memory": "8192"}, pick(vm.Config, "cores", "memory")); diff != "" {
			t.Errorf("VM config (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{30, 5}, sizes(vm.Config)); diff != "" {
			t.Errorf("disk sizes in GiB (-want +got):\n%s", diff)
		}
	})

	t.Run("a running VM asked for more CPUs and memory takes them at its next power cycle", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		converge(t, s, m)
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 12, 12288
		o := converge(t, s, m)
		if want := []string{"CPUs from 8 to 12", "memory from 8192 MiB to 12288 MiB"}; !o.UpToDate || !cmp.Equal(o.PendingRestart, want) {
			t.Fatalf("up to date %v, pending %q; want up to date with %q pending", o.UpToDate, o.PendingRestart, want)
		}
		if got := pick(theVM(t, sim).Config, "cores", "memory"); got["cores"] != "8" || got["memory"] != "8192" {
			t.Fatalf("the running VM's config changed to %v before its power cycle", got)
		}
		// Powered off, the VM takes the change; powered on again, nothing is pending.
		for _, power := range []banlieuev1.PowerState{banlieuev1.PowerStatePoweredOff, banlieuev1.PowerStatePoweredOn} {
			m.Spec.PowerState = power
			if o := converge(t, s, m); len(o.PendingRestart) > 0 {
				t.Fatalf("%s: pending %q", power, o.PendingRestart)
			}
		}
		if diff := cmp.Diff(map[string]string{"cores": "12", "memory": "12288"}, pick(theVM(t, sim).Config, "cores", "memory")); diff != "" {
			t.Errorf("VM config after its power cycle (-want +got):\n%s", diff)
		}
	})

	t.Run("Delete stops the VM and destroys it with its disks and snippet", func(t *testing.T) {
		deleteAll(t, s, m)
		if _, ok := sim.VM(vmid); ok {
			t.Fatalf("VM %d still exists", vmid)
		}
		vols, err := s.api.Volumes(ctx, proxmoxtest.Node1, proxmoxtest.Storage, pve.VolumeFilter{VMID: vmid})
		if err != nil {
			t.Fatal(err)
		}
		if len(vols) != 0 {
			t.Errorf("volumes of VM %d left: %v", vmid, vols)
		}
		time.Sleep(100 * time.Millisecond) // the snippet's imgdel task
		if _, ok := sim.Volume(proxmoxtest.Node1, "local:snippets/banlieue-"+uid+".yaml"); ok {
			t.Error("the user-data snippet is left")
		}
		o, err := s.Observe(ctx, m)
		if err != nil || o.Exists {
			t.Errorf("Observe after Delete = %+v, %v; want nothing", o, err)
		}
	})
}
