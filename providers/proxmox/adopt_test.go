package proxmox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/luthermonson/go-proxmox"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	"github.com/banlieue/banlieue/test/proxmoxer"
)

// The owner's marks on a VM banlieue did not make, which adoption keeps.
const (
	ownerTags  = "prod;web"
	ownerNotes = "Owner: team web\nBacked up nightly.\n"
)

// outsideAPI is a go-proxmox client of the simulator: the VMs' owner, not the driver.
func outsideAPI(sim *proxmoxtest.Simulator) *proxmox.Client {
	return proxmox.NewClient(sim.URL, proxmox.WithHTTPClient(sim.HTTPClient()), proxmox.WithAPIToken(sim.TokenID, sim.TokenSecret))
}

// makeLegacyVM makes on node, through api, a VM as its owner would, not banlieue: 4
// cores, 3072 MiB, an 8 GiB disk, a NIC with static cloud-init network config, a
// cloud-init drive and user-data snippet, the owner's tags and notes, started (set
// "start" to 0 in extra for a stopped one). extra adds or replaces parameters. It
// returns the VMID once the VM is made.
func makeLegacyVM(t *testing.T, sim *proxmoxtest.Simulator, api *proxmox.Client, node string, extra map[string]any) int {
	t.Helper()
	ctx := context.Background()
	if err := sim.WriteSnippet(ctx, node, proxmoxtest.SnippetsStorage, "legacy-user.yaml", []byte("#cloud-config\n")); err != nil {
		t.Fatal(err)
	}
	var next string
	if err := api.Get(ctx, "/cluster/nextid", &next); err != nil {
		t.Fatal(err)
	}
	vmid, err := strconv.Atoi(strings.TrimSpace(next))
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{
		"vmid": vmid, "name": "legacy-" + next, "cores": 4, "memory": 3072, "agent": 1,
		"scsi0": proxmoxtest.Storage + ":8", "ide2": proxmoxtest.Storage + ":cloudinit",
		"net0": "virtio,bridge=" + proxmoxtest.Bridge, "ipconfig0": "ip=10.9.8.7/24,gw=10.9.8.1",
		"tags": ownerTags, "description": ownerNotes, "start": 1,
		"cicustom": "user=" + proxmoxtest.SnippetsStorage + ":snippets/legacy-user.yaml",
	}
	maps.Copy(params, extra)
	var upid string
	if err := api.Post(ctx, "/nodes/"+node+"/qemu", params, &upid); err != nil {
		t.Fatal(err)
	}
	waitTask(t, api, upid)
	return vmid
}

// adoptingMachine is a machine that adopts the VM id names, whose spec fits the VM
// makeLegacyVM makes in CPUs, memory and disk, and differs in all else the driver would
// otherwise set: UEFI firmware, a NIC on another bridge with another address.
func adoptingMachine(uid, id string) *providersdk.Machine {
	m := newMachine(uid)
	m.Spec.AdoptProviderID = id
	m.Spec.Image = infrav1.MachineImage{}
	m.Spec.Hardware = infrav1.MachineHardware{CPUs: 4, MemoryMiB: 3072, Firmware: banlieuev1.FirmwareEFI}
	m.Spec.Disks = []infrav1.MachineDisk{{Name: "root", SizeGiB: 8, StorageClass: "fast"}}
	m.Spec.Interfaces = []infrav1.MachineInterface{{
		Name: "eth0", NetworkClass: "prod", Target: map[string]string{"bridge": "vmbr1"},
		IPAM: &banlieuev1.IPAM{Source: banlieuev1.IPAMSourceStatic, Static: banlieuev1.StaticIPAM{
			Addresses: []string{"10.1.2.3/24"}, Gateway: "10.1.2.1"}},
	}}
	return m
}

// connectWith opens a session to the simulator for a Provider with params added to
// its parameters.
func connectWith(t *testing.T, sim *proxmoxtest.Simulator, params map[string]string) *session {
	t.Helper()
	p := providerFor(sim)
	maps.Copy(p.Spec.Parameters, params)
	cl, err := newDriver(sim).Connect(context.Background(), infoFor(sim, p))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return cl.(*session)
}

// runStatus is the run status and QEMU PID of the VM on the first node, as PVE reports them.
func runStatus(t *testing.T, s *session, vmid int) pve.RunStatus {
	t.Helper()
	st, err := s.api.CurrentStatus(context.Background(), proxmoxtest.Node1, vmid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// powerTasks are the simulator's tasks that start, stop, pause or reboot a VM.
func powerTasks(sim *proxmoxtest.Simulator) []string {
	var out []string
	for _, tk := range sim.Tasks() {
		if slices.Contains([]string{"qmstart", "qmstop", "qmshutdown", "qmreboot", "qmsuspend", "qmresume", "qmreset"}, tk.Type) {
			out = append(out, tk.Type+" "+tk.UPID)
		}
	}
	return out
}

// reasonOf is the reason of a PermanentError or RetryableError err is or wraps; "" for
// another error.
func reasonOf(err error) string {
	var p *providersdk.PermanentError
	var r *providersdk.RetryableError
	switch {
	case errors.As(err, &p):
		return "Permanent " + p.Reason
	case errors.As(err, &r):
		return "Retryable " + r.Reason
	}
	return ""
}

// adopt is the Reconciler's adoption of the machine's VM: Observe, which must report
// it unclaimed, then Adopt, which must end at once.
func adopt(t *testing.T, s *session, m *providersdk.Machine) {
	t.Helper()
	ctx := context.Background()
	o, err := s.Observe(ctx, m)
	if err != nil || !o.Exists || !o.Unclaimed {
		t.Fatalf("Observe before adoption = %+v, %v; want the VM unclaimed", o, err)
	}
	res, err := s.Adopt(ctx, m, o)
	if err != nil || res.Task.InFlight() {
		t.Fatalf("Adopt = %+v, %v; want done at once", res, err)
	}
}

// withoutKeys is conf without keys.
func withoutKeys(conf map[string]string, keys ...string) map[string]string {
	out := maps.Clone(conf)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// A running VM made on PVE by its owner is adopted as it is: Observe reports it
// unclaimed, Adopt writes the machine's tag and description lines after the owner's,
// and from then on it is the machine's VM, with its real CPUs and memory, still running
// in the same QEMU process. The spec's NICs and firmware, which differ from the VM's,
// are never written; a disk the spec grows is grown online.
func TestAdoptARunningVMKeepsItAsItIs(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	api := outsideAPI(sim)
	s := connect(t, sim, newDriver(sim))
	vmid := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	before, _ := sim.VM(vmid)
	run := runStatus(t, s, vmid)
	if run.Status != "running" || run.PID == 0 {
		t.Fatalf("the owner's VM is %+v, want it running", run)
	}
	tasksBefore := powerTasks(sim)
	id := s.ProviderIDPrefix() + strconv.Itoa(vmid)
	if want := "proxmox://" + proxmoxtest.Cluster + "/"; s.ProviderIDPrefix() != want {
		t.Errorf("ProviderIDPrefix() = %q, want %q", s.ProviderIDPrefix(), want)
	}
	m := adoptingMachine("a1d0e7d0-1c8a-4a52-9a55-0c3c0b1f0a01", id)
	m.ClusterID = "cluster-a"

	o, err := s.Observe(ctx, m)
	want := providersdk.Observation{Exists: true, Unclaimed: true, ProviderID: id, PowerState: banlieuev1.PowerStatePoweredOn}
	if diff := cmp.Diff(want, o, ignoreState); err != nil || diff != "" {
		t.Fatalf("Observe of the unmarked VM (-want +got):\n%s\nerror %v", diff, err)
	}
	if st, ok := o.State.(*observed); !ok || st.vm == nil || st.vm.conf["digest"] == "" {
		t.Fatalf("Observe's State = %+v, want the VM's config with its digest for Adopt", o.State)
	}
	res, err := s.Adopt(ctx, m, o)
	if err != nil || res.Task.InFlight() {
		t.Fatalf("Adopt = %+v, %v; want done at once", res, err)
	}
	adopted, _ := sim.VM(vmid)
	wantMarks := map[string]string{"tags": ownerTags + ";" + TagPrefix + string(m.UID) + ";" + ClusterTagPrefix + "cluster-a;" + AdoptedTag,
		"description": ownerNotes + description(m, "")}
	if diff := cmp.Diff(wantMarks, pick(adopted, "tags", "description")); diff != "" {
		t.Errorf("tags and description after Adopt (-want +got):\n%s", diff)
	}
	// The orphan listing tells it from a VM banlieue made: never deleted as an orphan.
	marked, err := s.ListMarked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (The listing's names come from PVE's status daemon, which may not have seen the
	// VM's yet.)
	if !slices.ContainsFunc(marked, func(vm providersdk.MarkedVM) bool {
		return vm.ProviderID == id && vm.MachineUID == m.UID && vm.ClusterID == "cluster-a" && vm.Adopted
	}) {
		t.Errorf("ListMarked = %+v, want %s adopted by %s of cluster-a among them", marked, id, m.UID)
	}
	if diff := cmp.Diff(withoutKeys(before, "tags", "description"), withoutKeys(adopted, "tags", "description")); diff != "" {
		t.Errorf("Adopt changed more than the marks (-before +after):\n%s", diff)
	}

	o, err = s.Observe(ctx, m)
	record(t, m, o)
	want = providersdk.Observation{
		Exists: true, UpToDate: true, ProviderID: id, PowerState: banlieuev1.PowerStatePoweredOn,
		FailureDomain: proxmoxtest.Node1, WaitingForGuest: true, BootID: bootID(proxmoxtest.Node1, run.PID),
		Details:  &infrav1.ProxmoxStatus{Node: proxmoxtest.Node1, VMID: int32(vmid)},
		Hardware: &providersdk.Hardware{CPUs: 4, MemoryMiB: 3072, DiskBytes: []int64{8 * providersdk.GiB}},
	}
	if diff := cmp.Diff(want, o, ignoreState); err != nil || diff != "" {
		t.Fatalf("Observe of the adopted VM (-want +got):\n%s\nerror %v", diff, err)
	}
	// The VM's real hardware is what the machine's is compared with.
	st := o.State.(*observed)
	if got, want := hardware(st.vm.conf, st.vm.conf.DiskKeys()), (providersdk.Hardware{CPUs: 4, MemoryMiB: 3072, DiskBytes: []int64{8 * providersdk.GiB}}); !cmp.Equal(got, want) {
		t.Errorf("the adopted VM's hardware = %+v, want %+v", got, want)
	}
	m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 6, 4096
	if o, err := s.Observe(ctx, m); err != nil || !cmp.Equal(o.PendingRestart, []string{"CPUs from 4 to 6", "memory from 3072 MiB to 4096 MiB"}) {
		t.Errorf("Observe with more CPUs and memory: pending %q, %v; want the changes from the VM's real 4 CPUs and 3072 MiB", o.PendingRestart, err)
	}
	m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 3072

	// A larger disk is grown online; nothing else of the spec is written.
	m.Spec.Disks[0].SizeGiB = 10
	if o := converge(t, s, m); o.ProviderID != id || !o.UpToDate {
		t.Fatalf("the adopted VM after its disk grew: %+v", o)
	}
	after, _ := sim.VM(vmid)
	if got := pve.DiskGiB(after["scsi0"]); got != 10 {
		t.Errorf("scsi0 = %q after the spec grew it, want 10 GiB", after["scsi0"])
	}
	if diff := cmp.Diff(withoutKeys(adopted, "scsi0"), withoutKeys(after, "scsi0")); diff != "" {
		t.Errorf("reconciling the adopted VM changed more than its disk's size (-adopted +after):\n%s", diff)
	}
	for _, k := range []string{"net0", "ipconfig0", "ide2", "cicustom"} {
		if after[k] == "" || after[k] != before[k] {
			t.Errorf("config %s = %q, the owner's was %q", k, after[k], before[k])
		}
	}
	if now := runStatus(t, s, vmid); now.Status != "running" || now.PID != run.PID {
		t.Errorf("the VM's status after adoption = %+v, before %+v; want the same QEMU process still running", now, run)
	}
	if got := powerTasks(sim); !slices.Equal(got, tasksBefore) {
		t.Errorf("power tasks after adoption: %v, before: %v; want none started", got, tasksBefore)
	}
}

// Two machines adopt one VM at once, twenty times over: each time exactly one marks it
// and the other is told it is AlreadyManaged, by Adopt (the digest it read is stale)
// or by the Observe after it. In even rounds both read the VM before either writes,
// so both updates race on the digest; in odd rounds they run freely.
func TestTwoMachinesAdoptingOneVMOneWins(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	api := outsideAPI(sim)
	sessions := [2]*session{connect(t, sim, newDriver(sim)), connect(t, sim, newDriver(sim))}
	for round := range 20 {
		vmid := makeLegacyVM(t, sim, api, proxmoxtest.Node1, map[string]any{"start": 0})
		id := sessions[0].providerID(vmid)
		var ms [2]*providersdk.Machine
		for i := range ms {
			ms[i] = adoptingMachine(fmt.Sprintf("%08x-0000-4000-8000-%012d", round, i), id)
		}
		// errs[i] is machine i's AlreadyManaged, or another failure, and by[i] the call
		// that returned it; won[i] says it observed the VM as its own at the end.
		var (
			errs    [2]error
			by      [2]string
			won     [2]bool
			read    sync.WaitGroup
			wg      sync.WaitGroup
			release = make(chan struct{})
		)
		read.Add(2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := sessions[i].Observe(ctx, ms[i])
				read.Done()
				if round%2 == 0 {
					<-release
				}
				by[i] = "the first Observe"
				if err == nil {
					by[i] = "Adopt"
					if !o.Unclaimed {
						err = fmt.Errorf("first Observe = %+v, want the VM unclaimed", o)
					} else if _, err = sessions[i].Adopt(ctx, ms[i], o); err == nil {
						by[i] = "the Observe after Adopt"
						o, err = sessions[i].Observe(ctx, ms[i])
						won[i] = err == nil && o.Exists && !o.Unclaimed && o.ProviderID == id
					}
				}
				errs[i] = err
			}()
		}
		read.Wait()
		close(release)
		wg.Wait()

		winners, losers := 0, 0
		for i := range 2 {
			switch {
			case won[i] && errs[i] == nil:
				winners++
			case reasonOf(errs[i]) == "Retryable "+infrav1.MachineAlreadyManagedReason:
				losers++
				if round%2 == 0 && by[i] != "Adopt" {
					// Both read the same digest: the loser's update is the one refused.
					t.Errorf("round %d: machine %d was told AlreadyManaged by %s, want by Adopt", round, i, by[i])
				}
				// The loser keeps being told so, and the message names no machine.
				if _, err := sessions[i].Observe(ctx, ms[i]); reasonOf(err) != "Retryable "+infrav1.MachineAlreadyManagedReason {
					t.Errorf("round %d: machine %d's Observe after it lost: %v, want AlreadyManaged", round, i, err)
				}
				if msg := errs[i].Error(); !strings.Contains(msg, id) || strings.Contains(msg, string(ms[1-i].UID)) || strings.Contains(msg, ms[1-i].Name) {
					t.Errorf("round %d: AlreadyManaged says %q; want the VM's ID and not the other machine", round, msg)
				}
			default:
				t.Errorf("round %d: machine %d neither won nor was told AlreadyManaged: %s said %v", round, i, by[i], errs[i])
			}
		}
		if winners != 1 || losers != 1 {
			t.Errorf("round %d: %d winners and %d told AlreadyManaged, want 1 and 1", round, winners, losers)
		}
		conf, _ := sim.VM(vmid)
		var marks []string
		for _, tag := range pve.SplitTags(conf["tags"]) {
			if strings.HasPrefix(tag, TagPrefix) {
				marks = append(marks, tag)
			}
		}
		winner := ms[slices.Index(won[:], true)%2]
		if !slices.Equal(marks, []string{TagPrefix + string(winner.UID)}) || strings.Count(conf["description"], DescriptionUIDKey) != 1 ||
			descriptionUID(conf["description"]) != string(winner.UID) {
			t.Errorf("round %d: the VM's marks are tags %q and description %q, want the winner's %s alone", round, conf["tags"], conf["description"], winner.UID)
		}
	}
}

// What cannot be adopted is refused before anything is written: an ID of another
// form or cluster and a template are AdoptionTargetInvalid, a missing VM is not there
// (the Reconciler says AdoptionTargetNotFound), another machine's VM AlreadyManaged,
// and a VM outside the Provider's pool or nodes NotPermitted, with a message naming
// only the ID. The same VMs inside the Provider's pool and nodes are adoptable.
func TestAdoptRefusesWhatItMustNot(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	api := outsideAPI(sim)
	if err := api.Post(ctx, "/pools", map[string]any{"poolid": "tenant-a"}, nil); err != nil {
		t.Fatal(err)
	}
	s := connect(t, sim, newDriver(sim))
	pooled := connectWith(t, sim, map[string]string{ParamPool: "tenant-a"})
	onNode2 := connectWith(t, sim, map[string]string{ParamNode: proxmoxtest.Node2})

	legacy := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	inPool := makeLegacyVM(t, sim, api, proxmoxtest.Node1, map[string]any{"pool": "tenant-a"})
	legacy2 := makeLegacyVM(t, sim, api, proxmoxtest.Node2, map[string]any{"start": 0})
	other := newMachine("0be7d0e0-1c8a-4a52-9a55-0c3c0b1f0a09")
	converge(t, s, other)
	othersVM := int(statusOf(t, other).VMID)
	adoptedByOther := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	adopt(t, s, adoptingMachine("0be7d0e0-1c8a-4a52-9a55-0c3c0b1f0a0a", s.providerID(adoptedByOther)))
	snapshot := func() string { return fmt.Sprint(sim.VMs()) }
	before := snapshot()

	invalid, notPermitted := "Permanent "+infrav1.MachineAdoptionTargetInvalidReason, "Retryable "+infrav1.MachineNotPermittedReason
	tests := []struct {
		name string
		s    *session
		id   string
		// reason is the error's kind and reason; "" for none.
		reason string
		// exists and unclaimed are the Observation's, when there is no error.
		exists, unclaimed bool
	}{
		{name: "a missing VMID", s: s, id: s.providerID(4242)},
		{name: "another cluster", s: s, id: "proxmox://elsewhere/" + strconv.Itoa(legacy), reason: invalid},
		{name: "another scheme", s: s, id: "vsphere://4215a3c0-1c8a-4a52-9a55-0c3c0b1f0a01", reason: invalid},
		{name: "a VMID that is no number", s: s, id: s.ProviderIDPrefix() + "abc", reason: invalid},
		{name: "a VMID of zero", s: s, id: s.ProviderIDPrefix() + "0", reason: invalid},
		{name: "a VMID with a leading zero", s: s, id: s.ProviderIDPrefix() + "0" + strconv.Itoa(legacy), reason: invalid},
		{name: "a path below the VMID", s: s, id: s.providerID(legacy) + "/x", reason: invalid},
		{name: "a template", s: s, id: s.providerID(proxmoxtest.TemplateVMID), reason: invalid},
		{name: "a VM another machine made", s: s, id: s.providerID(othersVM), reason: "Retryable " + infrav1.MachineAlreadyManagedReason},
		{name: "a VM another machine adopted", s: s, id: s.providerID(adoptedByOther), reason: "Retryable " + infrav1.MachineAlreadyManagedReason},
		{name: "a VM outside the Provider's pool", s: pooled, id: s.providerID(legacy), reason: notPermitted},
		{name: "a VM in the Provider's pool", s: pooled, id: s.providerID(inPool), exists: true, unclaimed: true},
		{name: "a VM outside the Provider's nodes", s: onNode2, id: s.providerID(legacy), reason: notPermitted},
		{name: "a VM on the Provider's nodes", s: onNode2, id: s.providerID(legacy2), exists: true, unclaimed: true},
		{name: "an unmarked VM", s: s, id: s.providerID(legacy), exists: true, unclaimed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := adoptingMachine("0be7d0e0-1c8a-4a52-9a55-0c3c0b1f0a10", tt.id)
			o, err := tt.s.Observe(ctx, m)
			if got := reasonOf(err); got != tt.reason || (tt.reason == "" && err != nil) {
				t.Fatalf("Observe error = %v (%q), want %q", err, got, tt.reason)
			}
			if err != nil {
				msg := err.Error()
				for _, leak := range []string{proxmoxtest.Node1, "tenant-a", string(other.UID), other.Name} {
					if strings.Contains(msg, leak) {
						t.Errorf("the error %q names %q", msg, leak)
					}
				}
				if !strings.Contains(msg, tt.id) {
					t.Errorf("the error %q does not name the ID %s", msg, tt.id)
				}
			}
			if o.Exists != tt.exists || o.Unclaimed != tt.unclaimed || (!tt.exists && !cmp.Equal(o, providersdk.Observation{}, ignoreState)) {
				t.Errorf("Observe = %+v, want exists %v, unclaimed %v", o, tt.exists, tt.unclaimed)
			}
		})
	}
	if after := snapshot(); after != before {
		t.Errorf("observing changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
}

// An adopting machine being deleted owns only a VM it marked: a VM without marks, with
// another machine's, or none at all is not there for it, under either deletion policy,
// so the Reconciler lets the machine go without deleting or releasing anything.
func TestADeletedAdoptingMachineOwnsOnlyWhatItMarked(t *testing.T) {
	sim := proxmoxtest.Start(t)
	api := outsideAPI(sim)
	s := connect(t, sim, newDriver(sim))
	unmarked := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	foreign := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	adopt(t, s, adoptingMachine("de1e7ed0-0000-4000-8000-000000000001", s.providerID(foreign)))
	own := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	const uid = "de1e7ed0-0000-4000-8000-000000000002"
	adopt(t, s, adoptingMachine(uid, s.providerID(own)))
	before := fmt.Sprint(sim.VMs())

	tests := []struct {
		name   string
		id     string
		exists bool
	}{
		{name: "an unmarked VM", id: s.providerID(unmarked)},
		{name: "another machine's VM", id: s.providerID(foreign)},
		{name: "a missing VM", id: s.providerID(4242)},
		{name: "an ID of another form", id: "proxmox://elsewhere/" + strconv.Itoa(own)},
		{name: "its own VM", id: s.providerID(own), exists: true},
	}
	for _, tt := range tests {
		for _, policy := range []banlieuev1.DeletionPolicy{banlieuev1.DeletionPolicyDelete, banlieuev1.DeletionPolicyRetain} {
			t.Run(tt.name+" under "+string(policy), func(t *testing.T) {
				m := adoptingMachine(uid, tt.id)
				m.Deleting, m.Spec.DeletionPolicy = true, policy
				o, err := s.Observe(context.Background(), m)
				switch {
				case err != nil:
					t.Fatalf("Observe: %v", err)
				case tt.exists && (!o.Exists || o.Unclaimed || o.ProviderID != tt.id):
					t.Errorf("Observe = %+v, want the machine's own VM", o)
				case !tt.exists && !cmp.Equal(o, providersdk.Observation{}):
					t.Errorf("Observe = %+v, want no VM", o)
				}
			})
		}
	}
	if after := fmt.Sprint(sim.VMs()); after != before {
		t.Errorf("observing changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
}

// Releasing an adopted VM gives it back as it was before adoption: the machine's tag
// and description lines go, the owner's tags, notes and all else stay, and it keeps
// running in the same QEMU process; the machine then finds no VM.
func TestReleaseGivesAnAdoptedVMBackAsItWas(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim))
	vmid := makeLegacyVM(t, sim, outsideAPI(sim), proxmoxtest.Node1, nil)
	before, _ := sim.VM(vmid)
	run := runStatus(t, s, vmid)
	m := adoptingMachine("0e1ea5e0-1c8a-4a52-9a55-0c3c0b1f0a01", s.providerID(vmid))
	adopt(t, s, m)
	if conf, _ := sim.VM(vmid); !strings.Contains(conf["tags"], string(m.UID)) {
		t.Fatalf("the VM's tags after Adopt are %q, without the machine's", conf["tags"])
	}

	m.Deleting, m.Spec.DeletionPolicy = true, banlieuev1.DeletionPolicyRetain
	o, err := s.Observe(ctx, m)
	if err != nil || !o.Exists || o.Unclaimed {
		t.Fatalf("Observe of the adopted VM of a machine deleted under Retain: %+v, %v", o, err)
	}
	if res, err := s.Release(ctx, m, o); err != nil || res.Task.InFlight() {
		t.Fatalf("Release = %+v, %v; want done at once", res, err)
	}
	after, _ := sim.VM(vmid)
	if diff := cmp.Diff(withoutKeys(before, "digest"), withoutKeys(after, "digest")); diff != "" {
		t.Errorf("the VM after adoption and release (-before +after):\n%s", diff)
	}
	if now := runStatus(t, s, vmid); now.Status != "running" || now.PID != run.PID {
		t.Errorf("the VM's status after its release = %+v, before %+v; want the same QEMU process running", now, run)
	}
	if o, err := s.Observe(ctx, m); err != nil || !cmp.Equal(o, providersdk.Observation{}) {
		t.Errorf("Observe after the release = %+v, %v; want no VM", o, err)
	}
}

// TestProxmoxerSeesTheAdoptedVMMarkedAndRunning is the witness of a client banlieue
// did not write: Debian's python3-proxmoxer reads the adopted VM's config and status
// and finds the machine's tag beside the owner's, the owner's notes and NIC, and the
// VM running in the QEMU process it ran in before.
func TestProxmoxerSeesTheAdoptedVMMarkedAndRunning(t *testing.T) {
	proxmoxer.Require(t)

	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	vmid := makeLegacyVM(t, sim, outsideAPI(sim), proxmoxtest.Node1, nil)
	before, _ := sim.VM(vmid)
	run := runStatus(t, s, vmid)
	m := adoptingMachine("9e7e7e70-1c8a-4a52-9a55-0c3c0b1f0a01", s.providerID(vmid))
	adopt(t, s, m)

	got := proxmoxer.ReadVM(t, sim.Simulator, proxmoxtest.Node1, vmid)
	if tags := pve.SplitTags(got.Tags); !slices.Contains(tags, TagPrefix+string(m.UID)) || !slices.Contains(tags, "prod") || !slices.Contains(tags, "web") {
		t.Errorf("proxmoxer reads tags %q, want the machine's %s beside the owner's %s", got.Tags, TagPrefix+string(m.UID), ownerTags)
	}
	if !strings.HasPrefix(got.Description, ownerNotes) || descriptionUID(got.Description) != string(m.UID) {
		t.Errorf("proxmoxer reads the description %q, want the owner's notes, then the machine's UID", got.Description)
	}
	if got.Net0 != before["net0"] || got.Status != "running" || got.PID != run.PID {
		t.Errorf("proxmoxer reads net0 %q, status %q, PID %d; want %q, running, %d", got.Net0, got.Status, got.PID, before["net0"], run.PID)
	}
}

// For an adopted VM the driver compares CPUs, memory, disks and its tag only: the same
// spec that rewrites a made VM's firmware, NIC, cloud-init network config and user
// data changes none of them on an adopted one.
func TestAnAdoptedVMsChangesLeaveItsNICsFirmwareAndUserDataAlone(t *testing.T) {
	conf := pve.Config{
		"cores": "2", "memory": "2048", "bios": "seabios", "scsi0": proxmoxtest.Storage + ":vm-100-disk-0,size=8G",
		"ide2": proxmoxtest.Storage + ":vm-100-cloudinit,media=cdrom", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"ipconfig0": "ip=dhcp", "cicustom": "user=local:snippets/owner.yaml", "tags": "prod",
		"description": "Owner notes\n" + descriptionUserData + "local:snippets/" + TagPrefix + "0a0b0c0d-1c8a-4a52-9a55-0c3c0b1f0a01.yaml\n",
	}
	s := &session{}
	tests := []struct {
		name  string
		adopt bool
		// want are the config keys changed, the disks grown.
		want, grow []string
	}{
		{name: "adopted", adopt: true, want: []string{"cores", "memory", "scsi1", "tags"}, grow: []string{"scsi0"}},
		{name: "made by the driver", want: []string{"bios", "cicustom", "cores", "efidisk0", "ipconfig0", "memory", "net0", "scsi1", "tags"}, grow: []string{"scsi0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := adoptingMachine("0a0b0c0d-1c8a-4a52-9a55-0c3c0b1f0a01", "proxmox://banlieue/100")
			if !tt.adopt {
				m.Spec.AdoptProviderID = ""
			}
			m.Spec.Disks = append([]infrav1.MachineDisk{{Name: "root", SizeGiB: 10}}, infrav1.MachineDisk{Name: "data", SizeGiB: 2})
			ch, err := s.changes(m, &vmState{conf: conf}, banlieuev1.PowerStatePoweredOff)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.Sorted(maps.Keys(ch.set))
			if !cmp.Equal(got, tt.want) || len(ch.del) > 0 || !cmp.Equal(slices.Sorted(maps.Keys(ch.grow)), tt.grow) {
				t.Errorf("changes set %v, delete %v, grow %v; want set %v, grow %v", got, ch.del, slices.Sorted(maps.Keys(ch.grow)), tt.want, tt.grow)
			}
		})
	}
}
