package vsphere

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

func TestCrashDuringACloneLeavesOneVM(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	vspheretest.DelayTask(t, vspheretest.TaskClone, 1500*time.Millisecond)
	m := newMachine("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")

	// The first provider starts the clone and dies before it records the task.
	first, err := NewDriver().Connect(ctx, infoFor(sim, providerFor(sim)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := afterObserve(first, m, first.Create); err != nil {
		t.Fatal(err)
	}
	_ = first.Disconnect(ctx)

	// The restarted provider finds no VM yet, and creates again.
	s := connect(t, sim, NewDriver())
	o, err := s.Observe(ctx, m)
	if err != nil || o.Exists {
		t.Fatalf("Observe while the first clone runs = %+v, %v; want no VM yet", o, err)
	}
	res, err := s.Create(ctx, m, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Task.InFlight() {
		t.Fatal("the second Create started no clone, so the test no longer shows a clone failing on DuplicateName")
	}
	o = settle(t, s, m, res.Task)
	if !o.Exists {
		t.Fatalf("after the second clone failed on the first one's VM, Observe = %+v; want the VM adopted", o)
	}
	theVM(t, sim, string(m.UID))
}

func TestDeleteWhileTheCloneRunsWaitsForTheClone(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	vspheretest.DelayTask(t, vspheretest.TaskClone, time.Second)
	s := connect(t, sim, NewDriver())
	m := newMachine("2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f")
	res, err := afterObserve(s, m, s.Create)
	if err != nil {
		t.Fatal(err)
	}
	m.Task = res.Task
	o, err := s.Observe(ctx, m)
	if err != nil || !o.Exists || o.Task != res.Task {
		t.Fatalf("Observe during the clone = %+v, %v; want the VM reported as existing, with the clone in flight", o, err)
	}
	if _, err := afterObserve(s, m, s.Delete); !providersdk.IsInFlight(err) {
		t.Fatalf("Delete during the clone = %v; want InFlight", err)
	}
	settle(t, s, m, res.Task)
	for range 2 {
		res, err := afterObserve(s, m, s.Delete)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, s, m, res.Task)
	}
	if vms, err := sim.VMsWithUID(ctx, string(m.UID)); err != nil || len(vms) != 0 {
		t.Fatalf("%d VMs left with the machine's UID (%v)", len(vms), err)
	}
}

func TestCreateRefusesAnotherVMWithTheSameName(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	m := newMachine("1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d")

	// Someone clones the template under the machine's VM name.
	tmpl := object.NewVirtualMachine(sim.Client.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: sim.TemplateRef})
	inv, err := s.domains(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := inv.byName["dc0-dc0-c0"]
	pool := moref(fd.resourcePool)
	task, err := tmpl.Clone(ctx, object.NewFolder(sim.Client.Client, moref(fd.vmFolder)), vmName(m.Namespace, m.Name),
		types.VirtualMachineCloneSpec{Location: types.VirtualMachineRelocateSpec{Pool: &pool}})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// vCenter refuses the name itself, at the call or in the clone's task; either way
	// the machine is told, and the other VM is left alone.
	res, err := afterObserve(s, m, s.Create)
	for deadline := time.Now().Add(time.Minute); err == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m.Task = res.Task
		var obs providersdk.Observation
		if obs, err = s.Observe(ctx, m); err == nil && !obs.Task.InFlight() {
			t.Fatalf("the clone under a taken name was observed as %+v, want it refused", obs)
		}
	}
	if msg := wantErr(providersdk.IsPermanent, `a VM named "team-a.web-1b2c3d4e" already exists in the target folder and is not this machine's`, "")(err); msg != "" {
		t.Fatal(msg)
	}
}

func TestAVMWithTheMachinesInstanceUUIDIsCheckedForItsUID(t *testing.T) {
	tests := []struct {
		name      string
		uidKey    string // extraConfig banlieue.machine.uid of the VM; "" leaves it unset
		wantCheck func(error) bool
	}{
		{"a VM whose UID key is not written yet is a clone still being made", "", providersdk.IsInFlight},
		{"a VM whose UID key names another machine is left alone", "0aa0aa0a-0000-4000-8000-000000000000", providersdk.IsPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := vspheretest.Start(t)
			ctx := context.Background()
			s := connect(t, sim, NewDriver())
			m := newMachine("2c3d4e5f-6071-4b8c-9dae-1f2a3b4c5d6e")
			inv, err := s.domains(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			fd := inv.byName["dc0-dc0-c0"]
			cfg := &types.VirtualMachineConfigSpec{InstanceUuid: string(m.UID)}
			if tt.uidKey != "" {
				cfg.ExtraConfig = []types.BaseOptionValue{&types.OptionValue{Key: ExtraConfigMachineUID, Value: tt.uidKey}}
			}
			tmpl := object.NewVirtualMachine(sim.Client.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: sim.TemplateRef})
			pool := moref(fd.resourcePool)
			task, err := tmpl.Clone(ctx, object.NewFolder(sim.Client.Client, moref(fd.vmFolder)), "someone-else",
				types.VirtualMachineCloneSpec{Location: types.VirtualMachineRelocateSpec{Pool: &pool}, Config: cfg})
			if err == nil {
				err = task.Wait(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Observe(ctx, m); !tt.wantCheck(err) {
				t.Errorf("Observe: %v", err)
			}
		})
	}
}

func TestCreateRefusesUserDataThatGuestinfoCannotHold(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	tests := []struct {
		name string
		size int
		// want is the reason of the Permanent error Create returns, or "" for a clone.
		want string
	}{
		{name: "user data of exactly 576 KiB is cloned with", size: maxGuestInfoUserData},
		{name: "user data one byte over 576 KiB is refused, and no VM is made", size: maxGuestInfoUserData + 1, want: infrav1.MachineUserDataTooLargeReason},
		{name: "user data of 1 MiB, as much as a Secret holds, is refused", size: 1 << 20, want: infrav1.MachineUserDataTooLargeReason},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(fmt.Sprintf("5d6e7f80-91a2-4b3c-8d4e-5f60718293a%d", i))
			m.UserData = bytes.Repeat([]byte("a"), tt.size)
			m.Spec.UserData = &banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}}
			if tt.want == "" {
				created(t, sim, s, m)
				return
			}
			res, err := afterObserve(s, m, s.Create)
			var perm *providersdk.PermanentError
			if !errors.As(err, &perm) || perm.Reason != tt.want {
				t.Fatalf("Create = %+v, %v; want a Permanent error with reason %s", res, err, tt.want)
			}
			wantMsg := fmt.Sprintf(`the user data in key "user-data" of Secret team-a/cloud-init is %d bytes; `+
				"vSphere hands it to the guest base64-encoded in guestinfo.userdata, in the VM's .vmx file, which holds at most 589824 bytes of it (576 KiB); "+
				"make it smaller: gzip it (cloud-init reads gzip-compressed user data) or have it #include the rest from a URL", tt.size)
			if perm.Message != wantMsg {
				t.Errorf("message\n%s\nwant\n%s", perm.Message, wantMsg)
			}
			if vms, err := sim.VMsWithUID(ctx, string(m.UID)); err != nil || len(vms) != 0 {
				t.Errorf("VMs with the machine's UID: %d, %v; want none", len(vms), err)
			}
		})
	}
}

func TestGuestHostname(t *testing.T) {
	long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 192) // 253 characters, one label
	tests := []struct {
		name, machine, want string
	}{
		{name: "a short name is the host name as it is", machine: "web-1", want: "web-1"},
		{name: "a name with dots is a host name and a domain", machine: "web-1.prod", want: "web-1.prod"},
		{name: "a name that YAML reads as an octal number is quoted", machine: "0777", want: `"0777"`},
		{name: "a name that YAML reads as a float is quoted", machine: "1.10", want: `"1.10"`},
		{name: "a name that YAML reads as a boolean is quoted", machine: "yes", want: `"yes"`},
		{name: "a name that starts with a digit is quoted", machine: "9-lives", want: `"9-lives"`},
		{name: "a 253-character label is cut to one DNS label", machine: long, want: strings.Repeat("a", 60) + "-bb"},
		{name: "a long label after a dot makes the whole name one DNS label", machine: "web." + long, want: "web-" + strings.Repeat("a", 59)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := yamlString(hostname(tt.machine)); got != tt.want {
				t.Errorf("host name of %q = %s, want %s", tt.machine, got, tt.want)
			}
		})
	}
}
