package proxmox

import (
	"context"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// vmsOf lists the VMs whose description names the machine's UID, by VMID.
func vmsOf(sim *proxmoxtest.Simulator, m *providersdk.Machine) []int {
	var out []int
	for _, vm := range sim.VMs() {
		if descriptionUID(vm.Config["description"]) == string(m.UID) {
			out = append(out, vm.VMID)
		}
	}
	return out
}

// Another client clones onto the VMID PVE hands the machine too, and its worker locks
// the VMID first: the machine's clone task fails, and the machine is cloned again on a
// new VMID at once (no TaskFailed), never adopting the other client's VM.
func TestAVMIDRaceLostInTheTaskClonesAgainOnANewVMID(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.ForkDelay = 500 * time.Millisecond
		o.TaskDelays = map[string]time.Duration{"qmclone": 1500 * time.Millisecond}
	})
	ctx := context.Background()
	other := connect(t, sim, newDriver(sim)) // another client: it does not share the driver's VMID pool
	next, err := other.api.NextVMID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.api.Clone(ctx, proxmoxtest.Node1, proxmoxtest.TemplateVMID, pve.CloneOptions{NewID: next, Name: "other", Description: "someone else's"}); err != nil {
		t.Fatal(err)
	}
	s := connect(t, sim, newDriver(sim))
	m := newMachine("3a4b5c6d-0000-4000-8000-000000000021")
	lost, err := observeCreate(t, s, m)
	if err != nil || !lost.InFlight() || statusOf(t, m).VMID != int32(next) {
		t.Fatalf("Create = %+v, %v (VMID %d); want a clone onto VMID %d, the other client's", lost, err, statusOf(t, m).VMID, next)
	}
	setTask(m, lost)
	o := converge(t, s, m)
	if o.Details == nil || statusOf(t, m).VMID == int32(next) {
		t.Fatalf("the machine's VM is %d, want a new VMID, not the other client's %d", statusOf(t, m).VMID, next)
	}
	for _, tk := range sim.Tasks() {
		if tk.UPID == lost.Ref && !strings.Contains(tk.ExitStatus, "can't lock file '/var/lock/qemu-server/lock-") {
			t.Errorf("the machine's first clone ended %q, want the lock timeout of a lost race", tk.ExitStatus)
		}
	}
	if conf, _ := sim.VM(next); conf["name"] != "other" || descriptionUID(conf["description"]) != "" {
		t.Errorf("VM %d is %v, want the other client's, untouched", next, conf)
	}
	if got := vmsOf(sim, m); len(got) != 1 {
		t.Errorf("the machine's VMs: %v, want one", got)
	}
}

// A provider restarted after its clone ended but before it recorded where the VM is
// finds the clone although the cluster's listing has not reported it yet (status
// unknown, no name, no tag), and does not clone a second VM.
func TestAClonedVMTheListingHasNotReportedIsFound(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) { o.StatusInterval = time.Hour })
	ctx := context.Background()
	uid := "4b5c6d7e-0000-4000-8000-000000000022"
	clone, err := observeCreate(t, connect(t, sim, newDriver(sim)), newMachine(uid))
	if err != nil || !clone.InFlight() {
		t.Fatalf("Create = %+v, %v", clone, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := connect(t, sim, newDriver(sim)).api.TaskStatus(ctx, clone.Ref); err == nil && !st.Running {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("clone %s still running", clone.Ref)
		}
	}
	// The provider crashed: neither the task nor the VM's place is recorded.
	m := newMachine(uid)
	s := connect(t, sim, newDriver(sim))
	all, err := s.api.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if !r.Template && (r.Name != "" || r.Status != "unknown") {
			t.Fatalf("the listing reports %+v; the test needs the clone unreported", r)
		}
	}
	o, task, err := observeThen(t, s, m, providersdk.OperationCreate)
	if err != nil || !o.Exists || task.InFlight() {
		t.Fatalf("Observe = %+v, task %+v, %v; want the clone found", o, task, err)
	}
	converge(t, s, m)
	if got := vmsOf(sim, m); len(got) != 1 {
		t.Errorf("the machine's VMs: %v, want one", got)
	}
}

// Another client's task holds the VM's config lock longer than PVE waits: the config
// change fails with the lock timeout, which is a wait, and is made once the lock is
// free.
func TestAConfigChangeBlockedByAnotherTasksLockIsRetried(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.LockTimeout = 200 * time.Millisecond
		o.TaskDelays = map[string]time.Duration{"qmconfig": 1500 * time.Millisecond}
	})
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim))
	m := newMachine("5c6d7e8f-0000-4000-8000-000000000023")
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	converge(t, s, m)
	vmid := int(statusOf(t, m).VMID)
	api := proxmox.NewClient(sim.URL, proxmox.WithHTTPClient(sim.HTTPClient()), proxmox.WithAPIToken(sim.TokenID, sim.TokenSecret))
	if _, err := api.NodeRef(proxmoxtest.Node1).VirtualMachineRef(vmid).Config(ctx, proxmox.VirtualMachineOption{Name: "onboot", Value: 1}); err != nil {
		t.Fatal(err)
	}
	m.Spec.Hardware.CPUs = 4
	if _, err := observeUpdate(t, s, m); !providersdk.IsInFlight(err) {
		t.Fatalf("Update while another task holds the lock: %v, want a wait (InFlight)", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := reconcile(t, s, m); err == nil {
			break
		} else if !providersdk.IsInFlight(err) || time.Now().After(deadline) {
			t.Fatalf("reconcile: %v", err)
		}
	}
	if conf, _ := sim.VM(vmid); conf["cores"] != "4" || conf["onboot"] != "1" {
		t.Errorf("VM %d: cores %q onboot %q, want both changes", vmid, conf["cores"], conf["onboot"])
	}
}

// A cluster without quorum refuses the clone: the machine waits as for an outage,
// with a message saying what to do, and is made once quorum is back.
func TestACloneRefusedForNoQuorumIsReportedAndRetried(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	m := newMachine("6d7e8f90-0000-4000-8000-000000000024")
	sim.SetQuorate(false)
	_, err := observeCreate(t, s, m)
	if !providersdk.IsUnreachable(err) || !strings.Contains(err.Error(), "has no quorum") ||
		!strings.Contains(err.Error(), "bring enough of its nodes back online") || !strings.Contains(err.Error(), "cluster not ready - no quorum?") {
		t.Fatalf("Create without quorum: %v, want an Unreachable error saying the cluster has no quorum and what to do", err)
	}
	sim.SetQuorate(true)
	converge(t, s, m)
	if got := vmsOf(sim, m); len(got) != 1 {
		t.Errorf("the machine's VMs: %v, want one", got)
	}
}
