package vsphere

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/govmomi/event"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// VMs of govmomi's VPX model, which vcsim makes running and banlieue did not make.
const (
	hostVM0    = "DC0_H0_VM0"
	hostVM1    = "DC0_H0_VM1"
	clusterVM0 = "DC0_C0_RP0_VM0"
)

// vmEventTypes are the events an adoption must not cause, and the one it causes.
var vmEventTypes = []string{"VmPoweredOnEvent", "VmPoweredOffEvent", "VmBeingClonedEvent", "VmClonedEvent", "VmReconfiguredEvent"}

// simVM reads the VM named name with govmomi, on the simulator's own session: what
// vCenter holds, not what the driver reports.
func simVM(t *testing.T, sim *vspheretest.Simulator, name string) mo.VirtualMachine {
	t.Helper()
	vms, err := sim.VMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.Name == name {
			return vm
		}
	}
	t.Fatalf("the simulator has no VM %s", name)
	return mo.VirtualMachine{}
}

// simVMByRef reads the VM ref with govmomi, as simVM does.
func simVMByRef(t *testing.T, sim *vspheretest.Simulator, ref types.ManagedObjectReference) mo.VirtualMachine {
	t.Helper()
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(sim.Client.Client).RetrieveOne(context.Background(), ref, []string{"name", "config", "runtime"}, &vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

// markVM sets the VM's extraConfig ExtraConfigMachineUID to uid ("" removes it) with
// govmomi, as another installation, or a person, would.
func markVM(t *testing.T, sim *vspheretest.Simulator, ref types.ManagedObjectReference, uid string) {
	t.Helper()
	ctx := context.Background()
	task, err := object.NewVirtualMachine(sim.Client.Client, ref).Reconfigure(ctx, types.VirtualMachineConfigSpec{
		ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: ExtraConfigMachineUID, Value: uid}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// vmEvents counts, by type, the vmEventTypes vCenter recorded for the VM.
func vmEvents(t *testing.T, sim *vspheretest.Simulator, ref types.ManagedObjectReference) map[string]int {
	t.Helper()
	events, err := event.NewManager(sim.Client.Client).QueryEvents(context.Background(), types.EventFilterSpec{
		Entity:      &types.EventFilterSpecByEntity{Entity: ref, Recursion: types.EventFilterSpecRecursionOptionSelf},
		EventTypeId: vmEventTypes,
	})
	if err != nil {
		t.Fatalf("failed to read vCenter's events: %v", err)
	}
	out := map[string]int{}
	for _, e := range events {
		out[fmt.Sprintf("%T", e)[len("*types."):]]++
	}
	return out
}

// adoptingMachine is a machine that adopts the VM with BIOS UUID biosUUID, asking for
// 4 CPUs and 2 GiB: not the shape of govmomi's model VMs, so that what Observe reports
// comes from the VM.
func adoptingMachine(uid, biosUUID string) *providersdk.Machine {
	m := newMachine(uid)
	m.Spec.Image = infrav1.MachineImage{}
	m.Spec.Disks = nil
	m.Spec.FailureDomain = ""
	m.Spec.Hardware = infrav1.MachineHardware{CPUs: 4, MemoryMiB: 2048}
	m.Spec.AdoptProviderID = providerIDPrefix + biosUUID
	return m
}

// reasonOf is the reason of a RetryableError or PermanentError; "" for another error.
func reasonOf(err error) string {
	var retry *providersdk.RetryableError
	var perm *providersdk.PermanentError
	switch {
	case errors.As(err, &retry):
		return retry.Reason
	case errors.As(err, &perm):
		return perm.Reason
	}
	return ""
}

// reconcileAdoption does for an adopting machine what the Reconciler does, without
// failing the test (it runs in goroutines): Observe; Adopt a VM found unclaimed and
// record its task; wait for a task in flight; until Observe reports the VM claimed, or
// an error. A wait Adopt asks for (InFlight) is a look again.
func reconcileAdoption(ctx context.Context, s *session, m *providersdk.Machine) (providersdk.Observation, error) {
	for range 500 {
		o, err := s.Observe(ctx, m)
		if err != nil {
			return o, err
		}
		if o.Task.InFlight() {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		m.Task = providersdk.Task{}
		if !o.Exists || !o.Unclaimed {
			return o, nil
		}
		res, err := s.Adopt(ctx, m, o)
		switch {
		case providersdk.IsInFlight(err):
			time.Sleep(5 * time.Millisecond)
			continue
		case err != nil:
			return providersdk.Observation{}, err
		}
		if res.Task.InFlight() {
			m.Task = res.Task
			m.Task.StartedAt = time.Now()
		}
	}
	return providersdk.Observation{}, errors.New("the adoption did not settle")
}

func TestAdoptARunningVMKeepsItAsItIs(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())

	before := simVM(t, sim, hostVM0)
	if before.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("%s is %s, want a running VM to adopt", hostVM0, before.Runtime.PowerState)
	}
	const uid = "7a4e1f0c-3b2d-4c5e-8f9a-0b1c2d3e4f51"
	m := adoptingMachine(uid, before.Config.Uuid)
	m.ClusterID = "cluster-a"
	events := vmEvents(t, sim, before.Self)

	if got := s.ProviderIDPrefix(); got != "vsphere://" {
		t.Errorf("ProviderIDPrefix() = %q, want vsphere://", got)
	}

	o, err := s.Observe(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	want := providersdk.Observation{
		Exists: true, Unclaimed: true, ProviderID: m.Spec.AdoptProviderID, PowerState: banlieuev1.PowerStatePoweredOn,
	}
	if diff := cmp.Diff(want, o, cmpIgnoreState); diff != "" {
		t.Fatalf("Observe before the adoption (-want +got):\n%s", diff)
	}

	res, err := s.Adopt(ctx, m, o)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if res.Task.Operation != providersdk.OperationAdopt || !res.Task.InFlight() {
		t.Fatalf("Adopt task = %+v, want an adopt task", res.Task)
	}
	o = settle(t, s, m, res.Task)
	if !o.Exists || o.Unclaimed || o.ProviderID != m.Spec.AdoptProviderID || o.PowerState != banlieuev1.PowerStatePoweredOn {
		t.Errorf("Observe after the adoption = %+v; want the VM claimed, running, with provider ID %s", o, m.Spec.AdoptProviderID)
	}
	// The orphan listing tells it from a VM banlieue made: never deleted as an orphan.
	marked, err := s.ListMarked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantMarked := providersdk.MarkedVM{ProviderID: m.Spec.AdoptProviderID, Name: before.Name, MachineUID: m.UID,
		Machine: k8stypes.NamespacedName{Namespace: m.Namespace, Name: m.Name}, ClusterID: "cluster-a", Adopted: true}
	if !slices.Contains(marked, wantMarked) {
		t.Errorf("ListMarked = %+v, want %+v among them", marked, wantMarked)
	}
	if d, ok := o.Details.(*infrav1.VSphereStatus); !ok || d.MoRef != before.Self.Value || d.InstanceUUID != before.Config.InstanceUuid {
		t.Errorf("details = %#v, want the VM %s with its own instance UUID %s", o.Details, before.Self.Value, before.Config.InstanceUuid)
	}
	// The VM's real shape is reported: its CPUs and memory, not the machine's, which
	// wait for its next power cycle.
	vm, _ := o.State.(*vcenter.VM)
	if vm == nil || vm.CPUs != before.Config.Hardware.NumCPU || vm.MemoryMiB != int64(before.Config.Hardware.MemoryMB) {
		t.Errorf("observed VM %+v, want %d CPUs and %d MiB", vm, before.Config.Hardware.NumCPU, before.Config.Hardware.MemoryMB)
	}
	wantPending := []string{
		fmt.Sprintf("CPUs from %d to 4", before.Config.Hardware.NumCPU),
		fmt.Sprintf("memory from %d MiB to 2048 MiB", before.Config.Hardware.MemoryMB),
	}
	if !cmp.Equal(o.PendingRestart, wantPending) || !o.UpToDate {
		t.Errorf("pending %q, up to date %v; want %q pending and up to date", o.PendingRestart, o.UpToDate, wantPending)
	}

	after := simVMByRef(t, sim, before.Self)
	if got := vspheretest.ExtraConfig(after, ExtraConfigMachineUID); got != uid {
		t.Errorf("extraConfig %s = %q, want %s", ExtraConfigMachineUID, got, uid)
	}
	if after.Config.InstanceUuid != before.Config.InstanceUuid || after.Config.Uuid != before.Config.Uuid {
		t.Errorf("UUIDs (instance %s, BIOS %s), were (%s, %s)", after.Config.InstanceUuid, after.Config.Uuid, before.Config.InstanceUuid, before.Config.Uuid)
	}
	if after.Runtime.PowerState != before.Runtime.PowerState || !timeEqual(after.Runtime.BootTime, before.Runtime.BootTime) {
		t.Errorf("power %s booted %v, was %s booted %v", after.Runtime.PowerState, after.Runtime.BootTime, before.Runtime.PowerState, before.Runtime.BootTime)
	}
	if after.Config.Hardware.NumCPU != before.Config.Hardware.NumCPU || len(after.Config.Hardware.Device) != len(before.Config.Hardware.Device) {
		t.Errorf("hardware changed: %d CPUs and %d devices, was %d and %d", after.Config.Hardware.NumCPU, len(after.Config.Hardware.Device),
			before.Config.Hardware.NumCPU, len(before.Config.Hardware.Device))
	}
	// One reconfiguration, and no power operation or clone.
	events["VmReconfiguredEvent"]++
	if diff := cmp.Diff(events, vmEvents(t, sim, before.Self)); diff != "" {
		t.Errorf("the VM's events (-want +got):\n%s", diff)
	}

	t.Run("Adopt again needs nothing", func(t *testing.T) {
		o := o
		o.Unclaimed = true // as an Observe from before the claim would say
		res, err := s.Adopt(ctx, m, o)
		if err != nil || res.Task.InFlight() {
			t.Errorf("Adopt of the claimed VM = %+v, %v; want nothing done", res, err)
		}
	})
}

// cmpIgnoreState leaves the driver's State out of a comparison of observations.
var cmpIgnoreState = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".State" }, cmp.Ignore())

// timeEqual compares two optional times.
func timeEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func TestAdoptTwoMachinesAdoptingOneVMOneWins(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	vm := simVM(t, sim, hostVM1)

	t.Run("claim tasks that end at once", func(t *testing.T) {
		raceAdoptions(t, sim, s, vm, "a")
	})
	t.Run("slow claim tasks", func(t *testing.T) {
		// A claim's mark is readable only when its task ends, long after the claim's
		// re-read: the second claim must wait for the first's task, not see no mark.
		vspheretest.DelayTask(t, vspheretest.TaskReconfigure, 50*time.Millisecond)
		raceAdoptions(t, sim, s, vm, "b")
	})
}

// raceAdoptions has two machines adopt vm through s at once, 20 times over, the VM's
// mark cleared before each round: exactly one machine may see the VM as its own, then
// and afterwards, and the other AlreadyManaged.
func raceAdoptions(t *testing.T, sim *vspheretest.Simulator, s *session, vm mo.VirtualMachine, prefix string) {
	t.Helper()
	ctx := context.Background()
	wins := map[int]int{}
	for round := range 20 {
		markVM(t, sim, vm.Self, "")
		ms := []*providersdk.Machine{
			adoptingMachine(fmt.Sprintf("%s0000000-0000-4000-8000-%012d", prefix, round), vm.Config.Uuid),
			adoptingMachine(fmt.Sprintf("%s0000000-0000-4000-9000-%012d", prefix, round), vm.Config.Uuid),
		}
		obs := make([]providersdk.Observation, len(ms))
		errs := make([]error, len(ms))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, m := range ms {
			wg.Go(func() {
				<-start
				obs[i], errs[i] = reconcileAdoption(ctx, s, m)
			})
		}
		close(start)
		wg.Wait()

		mark := vspheretest.ExtraConfig(simVMByRef(t, sim, vm.Self), ExtraConfigMachineUID)
		winner := -1
		for i, m := range ms {
			if mark == string(m.UID) {
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: the VM's mark is %q, neither machine's", round, mark)
		}
		loser := 1 - winner
		wins[winner]++
		if errs[winner] != nil || !obs[winner].Exists || obs[winner].Unclaimed || obs[winner].ProviderID != ms[winner].Spec.AdoptProviderID {
			t.Errorf("round %d: the winner observed %+v, %v; want its VM", round, obs[winner], errs[winner])
		}
		if reason := reasonOf(errs[loser]); reason != infrav1.MachineAlreadyManagedReason {
			t.Errorf("round %d: the loser observed %+v, %v (reason %q); want AlreadyManaged", round, obs[loser], errs[loser], reason)
		}
		// Each keeps what it saw on its next look: the winner its VM, the loser out.
		if o, err := s.Observe(ctx, ms[winner]); err != nil || !o.Exists || o.Unclaimed {
			t.Errorf("round %d: the winner's next Observe = %+v, %v; want its VM", round, o, err)
		}
		if _, err := s.Observe(ctx, ms[loser]); reasonOf(err) != infrav1.MachineAlreadyManagedReason {
			t.Errorf("round %d: the loser's next Observe: %v; want AlreadyManaged", round, err)
		}
	}
	t.Logf("wins by machine: %v", wins)
}

func TestAdoptRefusesWhatItMustNot(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	inFolder := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters["folder"] = "adopted" })
	absFolder := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) {
		p.Spec.Parameters["folder"] = "/" + vspheretest.Datacenter + "/vm/adopted"
	})
	otherDC := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters["datacenter"] = "DC9" })
	ownDC := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters["datacenter"] = vspheretest.Datacenter })

	var tmpl mo.VirtualMachine
	if err := property.DefaultCollector(sim.Client.Client).RetrieveOne(ctx,
		types.ManagedObjectReference{Type: "VirtualMachine", Value: sim.TemplateRef}, []string{"config"}, &tmpl); err != nil {
		t.Fatal(err)
	}
	marked := simVM(t, sim, hostVM0)
	markVM(t, sim, marked.Self, "0ther000-0000-4000-8000-000000000001")
	free := simVM(t, sim, hostVM1)
	moved := simVM(t, sim, clusterVM0)

	// The VM moved into folder "adopted" is within the folder Providers; the others are
	// not.
	dc, err := object.NewSearchIndex(sim.Client.Client).FindByInventoryPath(ctx, "/"+vspheretest.Datacenter+"/vm")
	if err != nil || dc == nil {
		t.Fatalf("VM folder: %v", err)
	}
	folder, err := dc.(*object.Folder).CreateFolder(ctx, "adopted")
	if err != nil {
		t.Fatal(err)
	}
	task, err := folder.MoveInto(ctx, []types.ManagedObjectReference{moved.Self})
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	const (
		uid          = "c0ffee00-0000-4000-8000-000000000001"
		notPermitted = "is outside the datacenter and folder the Provider offers (parameters.datacenter, parameters.folder); it is left alone"
	)
	for _, tc := range []struct {
		name   string
		s      *session
		id     string
		exists bool
		reason string
		// message is what the error's message ends with.
		message string
	}{
		{name: "a BIOS UUID no VM has is not there", s: s, id: "vsphere://00000000-1111-2222-3333-444444444444"},
		{name: "another provider's ID", s: s, id: "libvirt://h/x", reason: infrav1.MachineAdoptionTargetInvalidReason, message: "not of the form vsphere://<BIOS UUID>"},
		{name: "a vsphere ID that is no UUID", s: s, id: "vsphere://not-a-uuid", reason: infrav1.MachineAdoptionTargetInvalidReason, message: "not of the form vsphere://<BIOS UUID>"},
		{name: "a vsphere ID without a UUID", s: s, id: "vsphere://", reason: infrav1.MachineAdoptionTargetInvalidReason, message: "not of the form vsphere://<BIOS UUID>"},
		{name: "a template", s: s, id: providerIDPrefix + tmpl.Config.Uuid, reason: infrav1.MachineAdoptionTargetInvalidReason, message: "it is a template"},
		{name: "a VM another machine marked", s: s, id: providerIDPrefix + marked.Config.Uuid, reason: infrav1.MachineAlreadyManagedReason, message: "is managed by another machine already; it is left alone"},
		{name: "a VM outside the Provider's folder", s: inFolder, id: providerIDPrefix + free.Config.Uuid, reason: infrav1.MachineNotPermittedReason, message: notPermitted},
		{name: "a VM outside the Provider's absolute folder", s: absFolder, id: providerIDPrefix + free.Config.Uuid, reason: infrav1.MachineNotPermittedReason, message: notPermitted},
		{name: "a VM outside the Provider's datacenter", s: otherDC, id: providerIDPrefix + free.Config.Uuid, reason: infrav1.MachineNotPermittedReason, message: notPermitted},
		{name: "a VM in the Provider's datacenter", s: ownDC, id: providerIDPrefix + free.Config.Uuid, exists: true},
		{name: "a VM in the Provider's folder", s: inFolder, id: providerIDPrefix + moved.Config.Uuid, exists: true},
		{name: "a VM in the Provider's absolute folder", s: absFolder, id: providerIDPrefix + moved.Config.Uuid, exists: true},
		{name: "an upper-case BIOS UUID", s: s, id: providerIDPrefix + strings.ToUpper(free.Config.Uuid), exists: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := adoptingMachine(uid, "")
			m.Spec.AdoptProviderID = tc.id
			o, err := tc.s.Observe(ctx, m)
			if got := reasonOf(err); got != tc.reason || (err != nil) != (tc.reason != "") {
				t.Fatalf("Observe = %+v, %v (reason %q); want reason %q", o, err, got, tc.reason)
			}
			if err != nil {
				// The message names the provider ID, and nothing of where the VM is.
				if msg := err.Error(); !strings.HasSuffix(msg, tc.message) || !strings.Contains(msg, tc.id) || strings.Contains(msg, "/vm") {
					t.Errorf("message %q; want one naming %s that ends with %q", msg, tc.id, tc.message)
				}
				return
			}
			if o.Exists != tc.exists || o.Unclaimed != tc.exists {
				t.Errorf("Observe = %+v; want exists and unclaimed %v", o, tc.exists)
			}
		})
	}

	t.Run("Adopt of a VM another machine marked since Observe is AlreadyManaged", func(t *testing.T) {
		m := adoptingMachine(uid, free.Config.Uuid)
		o, err := s.Observe(ctx, m)
		if err != nil || !o.Unclaimed {
			t.Fatalf("Observe = %+v, %v; want the VM unclaimed", o, err)
		}
		markVM(t, sim, free.Self, "0ther000-0000-4000-8000-000000000002")
		defer markVM(t, sim, free.Self, "")
		res, err := s.Adopt(ctx, m, o)
		if reasonOf(err) != infrav1.MachineAlreadyManagedReason || res.Task.InFlight() {
			t.Errorf("Adopt = %+v, %v; want AlreadyManaged and no task", res, err)
		}
		if got := vspheretest.ExtraConfig(simVMByRef(t, sim, free.Self), ExtraConfigMachineUID); got != "0ther000-0000-4000-8000-000000000002" {
			t.Errorf("the VM's mark is %q, want the other machine's", got)
		}
	})

	t.Run("two VMs with one BIOS UUID", func(t *testing.T) {
		// A VM copied by hand and registered as "moved" keeps the BIOS UUID of the
		// original: two VMs share it.
		task, err := object.NewVirtualMachine(sim.Client.Client, moved.Self).Reconfigure(ctx, types.VirtualMachineConfigSpec{Uuid: free.Config.Uuid})
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		m := adoptingMachine(uid, free.Config.Uuid)
		if o, err := s.Observe(ctx, m); reasonOf(err) != infrav1.MachineAdoptionTargetInvalidReason || !strings.HasSuffix(err.Error(), "several VMs share this BIOS UUID") {
			t.Errorf("Observe = %+v, %v; want AdoptionTargetInvalid", o, err)
		}
		// Once one of them carries the machine's UID, that one is the machine's.
		markVM(t, sim, free.Self, uid)
		if o, err := s.Observe(ctx, m); err != nil || !o.Exists || o.Unclaimed || o.Details.(*infrav1.VSphereStatus).MoRef != free.Self.Value {
			t.Errorf("Observe = %+v, %v; want the VM %s that carries the machine's UID", o, err, free.Self.Value)
		}
	})
}

func TestAdoptDeletedMachineOwnsOnlyWhatItMarked(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	vm := simVM(t, sim, hostVM0)
	const uid = "d0000000-0000-4000-8000-000000000001"

	for _, tc := range []struct {
		name, mark string
		policy     banlieuev1.DeletionPolicy
	}{
		{name: "unmarked, Delete", mark: ""},
		{name: "unmarked, Retain", mark: "", policy: banlieuev1.DeletionPolicyRetain},
		{name: "another machine's, Delete", mark: "0ther000-0000-4000-8000-000000000003"},
		{name: "another machine's, Retain", mark: "0ther000-0000-4000-8000-000000000003", policy: banlieuev1.DeletionPolicyRetain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			markVM(t, sim, vm.Self, tc.mark)
			m := adoptingMachine(uid, vm.Config.Uuid)
			m.Spec.DeletionPolicy = tc.policy
			m.Deleting = true
			o, err := s.Observe(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(providersdk.Observation{}, o); diff != "" {
				t.Errorf("Observe of the deleted machine (-want +got):\n%s", diff)
			}
			if got := vspheretest.ExtraConfig(simVMByRef(t, sim, vm.Self), ExtraConfigMachineUID); got != tc.mark {
				t.Errorf("the VM's mark is %q, want %q", got, tc.mark)
			}
		})
	}

	t.Run("its own VM is there", func(t *testing.T) {
		markVM(t, sim, vm.Self, uid)
		m := adoptingMachine(uid, vm.Config.Uuid)
		m.Deleting = true
		if o, err := s.Observe(ctx, m); err != nil || !o.Exists || o.Unclaimed {
			t.Errorf("Observe = %+v, %v; want the machine's VM", o, err)
		}
	})
}

func TestAdoptReleaseGivesTheVMBackRunning(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	before := simVM(t, sim, hostVM0)
	const uid = "e0000000-0000-4000-8000-000000000001"
	m := adoptingMachine(uid, before.Config.Uuid)
	m.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain

	if o, err := reconcileAdoption(ctx, s, m); err != nil || !o.Exists || o.Unclaimed {
		t.Fatalf("adoption: %+v, %v", o, err)
	}
	if got := vspheretest.ExtraConfig(simVMByRef(t, sim, before.Self), ExtraConfigMachineUID); got != uid {
		t.Fatalf("the adopted VM's mark is %q, want %s", got, uid)
	}

	m.Deleting = true
	o, err := s.Observe(ctx, m)
	if err != nil || !o.Exists {
		t.Fatalf("Observe of the deleted machine = %+v, %v; want its VM", o, err)
	}
	res, err := s.Release(ctx, m, o)
	if err != nil || res.Task.Operation != providersdk.OperationRelease {
		t.Fatalf("Release = %+v, %v; want a release task", res, err)
	}
	if o := settle(t, s, m, res.Task); o.Exists {
		t.Errorf("Observe after the release = %+v; want the VM let go", o)
	}
	after := simVMByRef(t, sim, before.Self)
	if got := vspheretest.ExtraConfig(after, ExtraConfigMachineUID); got != "" {
		t.Errorf("the released VM still carries %s=%s", ExtraConfigMachineUID, got)
	}
	if after.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || after.Config.InstanceUuid != before.Config.InstanceUuid {
		t.Errorf("the released VM is %s with instance UUID %s; want it running with %s", after.Runtime.PowerState, after.Config.InstanceUuid, before.Config.InstanceUuid)
	}

	// Free again, another machine may adopt it.
	other := adoptingMachine("e0000000-0000-4000-8000-000000000002", before.Config.Uuid)
	if o, err := s.Observe(ctx, other); err != nil || !o.Unclaimed {
		t.Errorf("another machine's Observe = %+v, %v; want the VM unclaimed", o, err)
	}
}
