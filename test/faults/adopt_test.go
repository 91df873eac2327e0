package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goproxmox "github.com/luthermonson/go-proxmox"
	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/event"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// Adoption under kills: VMs made on the simulated vCenter and Proxmox VE behind
// banlieue's back, each adopted by two VirtualMachines of two namespaces at once while
// the fleet is created under kill rounds. The backends' compare-and-set must let exactly
// one of the two claim it, with nothing cloned or power-cycled; deleted under
// deletionPolicy Retain, the VM must be left running, unmarked.

// adoptNamespaces are the two namespaces whose VirtualMachines race for each backend VM.
// They are not the fleet's: the loser never becomes Ready, which the fleet's
// convergence would wait for.
var adoptNamespaces = []string{"faults-adopt-a", "faults-adopt-b"}

// adoptedPerSimulator is how many VMs are made behind banlieue's back on each simulator.
const adoptedPerSimulator = 2

// adoption is one backend VM that two VirtualMachines adopt.
type adoption struct {
	// provider is the Provider (vsphereProv or proxmoxProv) and kind its machines' kind.
	provider, kind string
	// name is the VirtualMachines' name in each of adoptNamespaces.
	name string
	// providerID is the backend VM's ID, which both adopt.
	providerID string
	// vSphere: the VM, and when it was made and running, before banlieue saw it:
	// vCenter records no power or clone event for it after that.
	ref   types.ManagedObjectReference
	since time.Time
	// Proxmox VE: the VMID, the QEMU PID and the start, stop and clone tasks.
	vmid  int
	pid   int
	tasks []string
	// winner is the namespace whose VirtualMachine adopted it and winnerUID its
	// machine's UID; loserUID is the other machine's. Set by awaitAdoption.
	winner, winnerUID, loserUID string
	// released is set once both VirtualMachines are gone.
	released bool
}

// enableAdoption sets adoptionPolicy: Enabled on every Provider among objs.
func enableAdoption(objs []client.Object) []client.Object {
	for _, o := range objs {
		if p, ok := o.(*banlieuev1.Provider); ok {
			p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled
		}
	}
	return objs
}

// key is the VirtualMachine of adoption a in namespace ns.
func (a *adoption) key(ns string) client.ObjectKey {
	return client.ObjectKey{Namespace: ns, Name: a.name}
}

// startAdoption makes adoptedPerSimulator running VMs on each simulator directly, of
// the fleet's class's shape, and creates for each two VirtualMachines in
// adoptNamespaces that adopt it, one right after the other.
func (r *rig) startAdoption(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	for _, ns := range adoptNamespaces {
		g.Expect(r.c.Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	for i := range adoptedPerSimulator {
		r.adoptions = append(r.adoptions, r.vsphereAdoptable(t, fmt.Sprintf("legacy-vs-%d", i)))
	}
	for i := range adoptedPerSimulator {
		r.adoptions = append(r.adoptions, r.proxmoxAdoptable(t, fmt.Sprintf("legacy-pve-%d", i)))
	}
	for _, a := range r.adoptions {
		for _, ns := range adoptNamespaces {
			vm := builder.VirtualMachine(ns, a.name, className, "", func(vm *banlieuev1.VirtualMachine) {
				vm.Spec.AdoptProviderID = a.providerID
				vm.Spec.MigrationPolicy = banlieuev1.MigrationPolicyNever
				backend := vsphere.ProviderClass
				if a.provider == proxmoxProv {
					backend = proxmox.ProviderClass
				}
				vm.Spec.Placement.ProviderSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"backend": backend}}
			})
			g.Expect(r.c.Create(r.ctx, vm)).To(Succeed())
		}
	}
}

// vsphereAdoptable clones the simulated vCenter's template, with its own session, into
// a running VM name of the fleet's class's shape (1 CPU, 256 MiB, the template's 10 GiB
// disk), in the datacenter the Provider offers.
func (r *rig) vsphereAdoptable(t *testing.T, name string) *adoption {
	t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	c := r.backends.VSphere.OwnClient().Client
	tmpl := object.NewVirtualMachine(c, types.ManagedObjectReference{Type: "VirtualMachine", Value: r.backends.VSphere.TemplateRefs[devenv.VSphereTemplate]})
	finder := find.NewFinder(c)
	dc, err := finder.Datacenter(ctx, vspheresim.Datacenter)
	if err != nil {
		t.Fatal(err)
	}
	finder.SetDatacenter(dc)
	cluster, err := finder.ClusterComputeResource(ctx, vspheresim.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := cluster.ResourcePool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	folders, err := dc.Folders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	poolRef := pool.Reference()
	task, err := tmpl.Clone(ctx, folders.VmFolder, name, types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &poolRef},
		Config:   &types.VirtualMachineConfigSpec{NumCPUs: 1, MemoryMB: 256},
		PowerOn:  true,
	})
	if err != nil {
		t.Fatalf("failed to clone %s: %v", name, err)
	}
	info, err := task.WaitForResult(ctx)
	if err != nil {
		t.Fatalf("failed to clone %s: %v", name, err)
	}
	ref := info.Result.(types.ManagedObjectReference)
	var vm mo.VirtualMachine
	if err := object.NewVirtualMachine(c, ref).Properties(ctx, ref, []string{"config.uuid", "config.hardware", "runtime.powerState"}, &vm); err != nil {
		t.Fatal(err)
	}
	if hw := vm.Config.Hardware; hw.NumCPU != 1 || hw.MemoryMB != 256 {
		t.Fatalf("%s has %d CPUs and %d MiB, not the fleet class's 1 and 256", name, hw.NumCPU, hw.MemoryMB)
	}
	if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("%s is %s, not running", name, vm.Runtime.PowerState)
	}
	return &adoption{provider: vsphereProv, kind: "VSphereMachine", name: name, providerID: "vsphere://" + vm.Config.Uuid,
		ref: ref, since: time.Now()}
}

// vspherePowerAndCloneEvents counts the power-on, power-off and clone events the
// simulated vCenter recorded for a VM since a time: its own record, which banlieue did
// not write. Only events since are asked for, as vcsim keeps only its latest thousand
// events, and a fleet's deletion pushes older ones out.
func (r *rig) vspherePowerAndCloneEvents(t *testing.T, ref types.ManagedObjectReference, since time.Time) int {
	t.Helper()
	events, err := event.NewManager(r.backends.VSphere.OwnClient().Client).QueryEvents(r.ctx, types.EventFilterSpec{
		Entity:      &types.EventFilterSpecByEntity{Entity: ref, Recursion: types.EventFilterSpecRecursionOptionSelf},
		Time:        &types.EventFilterSpecByTime{BeginTime: &since},
		EventTypeId: []string{"VmPoweredOnEvent", "VmPoweredOffEvent", "VmBeingClonedEvent", "VmClonedEvent"},
	})
	if err != nil {
		t.Fatalf("failed to read vCenter's events: %v", err)
	}
	return len(events)
}

// pveAPI is a client of the simulated Proxmox VE with its API token.
func (r *rig) pveAPI() *goproxmox.Client {
	pve := r.backends.Proxmox
	return goproxmox.NewClient(pve.URL, goproxmox.WithHTTPClient(pve.HTTPClient()), goproxmox.WithAPIToken(pve.TokenID, pve.TokenSecret))
}

// pveNode is the node the Provider offers and the adopted VMs are made on.
const pveNode = "pve1"

// proxmoxAdoptable makes a running VM name on the simulated Proxmox VE through its API,
// of the fleet's class's shape: 1 core, 256 MiB, a 10 GiB disk on the storage and a NIC
// on the bridge the Provider offers.
func (r *rig) proxmoxAdoptable(t *testing.T, name string) *adoption {
	t.Helper()
	g := NewWithT(t)
	api := r.pveAPI()
	var next string
	g.Expect(api.Get(r.ctx, "/cluster/nextid", &next)).To(Succeed())
	vmid, err := strconv.Atoi(strings.TrimSpace(next))
	g.Expect(err).NotTo(HaveOccurred())
	var upid string
	g.Expect(api.Post(r.ctx, "/nodes/"+pveNode+"/qemu", map[string]any{
		"vmid": vmid, "name": name, "cores": 1, "memory": 256, "agent": 1,
		"scsi0": "local-lvm:10", "net0": "virtio,bridge=vmbr0", "tags": "legacy", "description": "made by hand", "start": 1,
	}, &upid)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		g.Expect(api.Get(r.ctx, "/nodes/"+pveNode+"/tasks/"+upid+"/status", &st)).To(Succeed())
		g.Expect(st.Status).To(Equal("stopped"))
		g.Expect(st.ExitStatus).To(Equal("OK"))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	var pid int
	g.Eventually(func(g Gomega) {
		status, p := r.pveStatus(g, vmid)
		g.Expect(status).To(Equal("running"))
		g.Expect(p).NotTo(BeZero())
		pid = p
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	return &adoption{provider: proxmoxProv, kind: "ProxmoxMachine", name: name, providerID: fmt.Sprintf("proxmox://%s/%d", proxmoxsim.ClusterName, vmid),
		vmid: vmid, pid: pid, tasks: r.pvePowerTasks(vmid)}
}

// pveStatus is the VM's run status and QEMU PID, as the PVE API says.
func (r *rig) pveStatus(g Gomega, vmid int) (string, int) {
	var st struct {
		Status string `json:"status"`
		PID    int    `json:"pid"`
	}
	g.Expect(r.pveAPI().Get(r.ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", pveNode, vmid), &st)).To(Succeed())
	return st.Status, st.PID
}

// pvePowerTasks are the simulator's tasks that started, stopped, paused, rebooted or
// cloned the VM vmid.
func (r *rig) pvePowerTasks(vmid int) []string {
	var out []string
	for _, tk := range r.backends.Proxmox.Tasks() {
		if tk.ID == strconv.Itoa(vmid) && slices.Contains([]string{"qmstart", "qmstop", "qmshutdown", "qmreboot", "qmsuspend", "qmresume", "qmreset", "qmclone"}, tk.Type) {
			out = append(out, tk.Type+" "+tk.UPID)
		}
	}
	slices.Sort(out)
	return out
}

// machineOf reads the machine of kind in ns named name: its UID and Ready condition.
func (r *rig) machineOf(g Gomega, kind, ns, name string) (uid, ready string) {
	var (
		obj        client.Object
		conditions func() []metav1.Condition
	)
	switch kind {
	case "VSphereMachine":
		m := &infrav1.VSphereMachine{}
		obj, conditions = m, func() []metav1.Condition { return m.Status.Conditions }
	default:
		m := &infrav1.ProxmoxMachine{}
		obj, conditions = m, func() []metav1.Condition { return m.Status.Conditions }
	}
	g.Expect(r.c.Get(r.ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed(), "%s %s/%s", kind, ns, name)
	return string(obj.GetUID()), conditionOf(conditions(), banlieuev1.ReadyCondition)
}

// awaitAdoption waits until, for each backend VM, one of its two VirtualMachines is
// Ready with the VM's ID as its providerID and the other's machine is Ready=False
// AlreadyManaged, and records which won. Then it checks, with each backend's own API,
// that the VM carries the winner's mark and no other, and was neither cloned nor
// power-cycled.
func (r *rig) awaitAdoption(t *testing.T) {
	t.Helper()
	for _, a := range r.adoptions {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			var ready []string
			for _, ns := range adoptNamespaces {
				vm := &banlieuev1.VirtualMachine{}
				g.Expect(r.c.Get(r.ctx, a.key(ns), vm)).To(Succeed())
				if strings.HasPrefix(conditionOf(vm.Status.Conditions, banlieuev1.ReadyCondition), "True/") {
					g.Expect(vm.Status.ProviderID).To(Equal(a.providerID), "%s/%s is Ready", ns, a.name)
					ready = append(ready, ns)
				}
			}
			g.Expect(ready).To(HaveLen(1), "%s: Ready VirtualMachines that adopt %s", a.name, a.providerID)
			a.winner = ready[0]
			loser := adoptNamespaces[0]
			if loser == a.winner {
				loser = adoptNamespaces[1]
			}
			a.winnerUID, _ = r.machineOf(g, a.kind, a.winner, a.name)
			var cond string
			a.loserUID, cond = r.machineOf(g, a.kind, loser, a.name)
			g.Expect(cond).To(HavePrefix("False/"+infrav1.MachineAlreadyManagedReason+":"), "%s %s/%s", a.kind, loser, a.name)
			vm := &banlieuev1.VirtualMachine{}
			g.Expect(r.c.Get(r.ctx, a.key(loser), vm)).To(Succeed())
			g.Expect(vm.Status.ProviderID).To(BeEmpty(), "the losing VirtualMachine %s/%s", loser, a.name)
		}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(Succeed())
		t.Logf("%s (%s): adopted by %s/%s, machine %s; the other namespace's machine is AlreadyManaged", a.name, a.providerID, a.winner, a.name, a.winnerUID)
		r.checkAdopted(t, a)
	}
}

// checkAdopted checks with the backend's own API that the VM carries exactly one mark,
// its winner's, runs, and was neither cloned nor power-cycled since it was made.
func (r *rig) checkAdopted(t *testing.T, a *adoption) {
	t.Helper()
	var marks []string
	switch a.provider {
	case vsphereProv:
		c := r.backends.VSphere.OwnClient().Client
		var vm mo.VirtualMachine
		if err := object.NewVirtualMachine(c, a.ref).Properties(r.ctx, a.ref, []string{"config.extraConfig", "runtime.powerState"}, &vm); err != nil {
			t.Fatalf("failed to read %s: %v", a.name, err)
		}
		for _, o := range vm.Config.ExtraConfig {
			ov := o.GetOptionValue()
			if ov.Key == vsphere.ExtraConfigMachineUID {
				marks = append(marks, fmt.Sprint(ov.Value))
			}
			if s := fmt.Sprint(ov.Value); strings.Contains(s, a.loserUID) {
				t.Errorf("%s: extraConfig %s=%s names the losing machine %s", a.name, ov.Key, s, a.loserUID)
			}
		}
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			t.Errorf("%s is %s, not running", a.name, vm.Runtime.PowerState)
		}
		if n := r.vspherePowerAndCloneEvents(t, a.ref, a.since); n != 0 {
			t.Errorf("vCenter recorded %d power or clone events for %s since it was made, want none", n, a.name)
		}
	case proxmoxProv:
		conf, ok := r.backends.Proxmox.VM(a.vmid)
		if !ok {
			t.Fatalf("%s (VMID %d) is gone", a.name, a.vmid)
		}
		for _, tag := range strings.FieldsFunc(conf["tags"], func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if strings.HasPrefix(tag, proxmox.TagPrefix) {
				marks = append(marks, "tag "+strings.TrimPrefix(tag, proxmox.TagPrefix))
			}
		}
		for line := range strings.SplitSeq(conf["description"], "\n") {
			if uid, ok := strings.CutPrefix(strings.TrimSpace(line), strings.TrimSpace(proxmox.DescriptionUIDKey)); ok {
				marks = append(marks, "description "+strings.TrimSpace(uid))
			}
		}
		for k, v := range conf {
			if strings.Contains(v, a.loserUID) {
				t.Errorf("%s: config %s=%q names the losing machine %s", a.name, k, v, a.loserUID)
			}
		}
		g := NewWithT(t)
		status, pid := r.pveStatus(g, a.vmid)
		if status != "running" || pid != a.pid {
			t.Errorf("%s is %s with QEMU PID %d; it ran with PID %d", a.name, status, pid, a.pid)
		}
		if tasks := r.pvePowerTasks(a.vmid); !slices.Equal(tasks, a.tasks) {
			t.Errorf("power or clone tasks for %s since it was made: %v, before %v", a.name, tasks, a.tasks)
		}
		g.Expect(marks).To(ConsistOf("tag "+a.winnerUID, "description "+a.winnerUID), "%s: banlieue's marks", a.name)
		return
	}
	if len(marks) != 1 || marks[0] != a.winnerUID {
		t.Errorf("%s: extraConfig %s is %v, want the winner's %s only", a.name, vsphere.ExtraConfigMachineUID, marks, a.winnerUID)
	}
}

// adoptionLosers are the UIDs of the machines that lost an adoption: they stand for no
// backend VM, and should not.
func (r *rig) adoptionLosers() map[string]bool {
	out := map[string]bool{}
	for _, a := range r.adoptions {
		if a.loserUID != "" {
			out[a.loserUID] = true
		}
	}
	return out
}

// machineNamespaces are the namespaces that hold machines: the fleet's and, once the
// adoptions began, theirs.
func (r *rig) machineNamespaces() []string {
	if len(r.adoptions) == 0 {
		return []string{namespace}
	}
	return append([]string{namespace}, adoptNamespaces...)
}

// adoptionVMs are the VirtualMachines of the adoptions on provider that are not
// released yet, the losers first, so that no loser finds its VM unmarked by the
// winner's release before its own deletion.
func (r *rig) adoptionVMs(provider string) []client.ObjectKey {
	var losers, winners []client.ObjectKey
	for _, a := range r.adoptions {
		if a.provider != provider || a.released {
			continue
		}
		for _, ns := range adoptNamespaces {
			if ns == a.winner {
				winners = append(winners, a.key(ns))
			} else {
				losers = append(losers, a.key(ns))
			}
		}
	}
	return append(losers, winners...)
}

// retainAdopted sets deletionPolicy Retain on the adoptions' VirtualMachines of
// provider (winners and losers).
func (r *rig) retainAdopted(t *testing.T, provider string) {
	t.Helper()
	g := NewWithT(t)
	for _, key := range r.adoptionVMs(provider) {
		g.Eventually(func() error {
			vm := &banlieuev1.VirtualMachine{}
			if err := r.c.Get(r.ctx, key, vm); err != nil {
				return err
			}
			vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain
			return r.c.Update(r.ctx, vm)
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}
}

// releaseAdopted deletes the adoptions' VirtualMachines of provider, set to Retain,
// losers first, and checks that their backend VMs are left as checkReleased says.
func (r *rig) releaseAdopted(t *testing.T, provider string) {
	t.Helper()
	g := NewWithT(t)
	r.retainAdopted(t, provider)
	for _, key := range r.adoptionVMs(provider) {
		vm := &banlieuev1.VirtualMachine{}
		vm.Namespace, vm.Name = key.Namespace, key.Name
		g.Expect(client.IgnoreNotFound(r.c.Delete(r.ctx, vm))).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(r.c.Get(r.ctx, key, &banlieuev1.VirtualMachine{}))
		}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(BeTrue(), "VirtualMachine %s is still there", key)
	}
	r.checkReleased(t, provider)
}

// awaitAdoptedGone waits until no VirtualMachine of the adoptions on provider is left.
func (r *rig) awaitAdoptedGone(g Gomega, provider string) {
	for _, key := range r.adoptionVMs(provider) {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(r.c.Get(r.ctx, key, &banlieuev1.VirtualMachine{}))
		}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(BeTrue(), "VirtualMachine %s is still there", key)
	}
}

// checkReleased checks that the backend VMs the adoptions of provider adopted, whose
// VirtualMachines are gone, are still there, running, unmarked (checkRetained), and
// still neither cloned nor power-cycled; it adds them to r.retained.
func (r *rig) checkReleased(t *testing.T, provider string) {
	t.Helper()
	var vms []retainedVM
	for _, a := range r.adoptions {
		if a.provider == provider && !a.released {
			vms = append(vms, retainedVM{name: a.winner + "/" + a.name, providerID: a.providerID, power: banlieuev1.PowerStatePoweredOn})
		}
	}
	if r.retained == nil {
		r.retained = map[string]bool{}
	}
	for id := range r.checkRetained(t, vms) {
		r.retained[id] = true
	}
	for _, a := range r.adoptions {
		if a.provider != provider || a.released {
			continue
		}
		a.released = true
		switch provider {
		case vsphereProv:
			if n := r.vspherePowerAndCloneEvents(t, a.ref, a.since); n != 0 {
				t.Errorf("vCenter recorded %d power or clone events for %s since it was made, want none", n, a.name)
			}
		case proxmoxProv:
			status, pid := r.pveStatus(NewWithT(t), a.vmid)
			if status != "running" || pid != a.pid {
				t.Errorf("released %s is %s with QEMU PID %d; it ran with PID %d", a.name, status, pid, a.pid)
			}
			if tasks := r.pvePowerTasks(a.vmid); !slices.Equal(tasks, a.tasks) {
				t.Errorf("power or clone tasks for %s since it was made: %v, before %v", a.name, tasks, a.tasks)
			}
		}
	}
}
