package e2e

import (
	"context"
	"encoding/xml"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	goproxmox "github.com/luthermonson/go-proxmox"
	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/event"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/sim/libvirtd"
	"github.com/banlieue/banlieue/test/proxmoxer"
)

// The tests of section 4 (adoption) and 5 (deletionPolicy Retain) of
// docs/proposals/20261204-day-2-operations.md, the way a user does it: a VM made on the
// backend directly, a Provider that allows adoption, a VMClass of the VM's shape and a
// VirtualMachine naming the VM's provider ID; then Retain and delete. A witness outside
// banlieue (govmomi, the PVE API, virsh) checks that nothing but the mark changed.

// enableAdoption lets the Provider's VMs be adopted.
func enableAdoption(p *banlieuev1.Provider, _ *corev1.Secret) {
	p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled
}

// providerIDPrefix waits for the Provider to be Ready with its status.providerIDPrefix,
// which its provider controller writes, and returns the prefix.
func (f *fixture) providerIDPrefix(p *banlieuev1.Provider) string {
	f.t.Helper()
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: "))
		g.Expect(p.Status.ProviderIDPrefix).NotTo(BeEmpty())
	}, 30*time.Second)
	return p.Status.ProviderIDPrefix
}

// adoptingVM creates a VirtualMachine of class that adopts the backend VM id: no
// imageRef, migrationPolicy never, placed on the Providers labelled selector.
func (f *fixture) adoptingVM(name string, class *banlieuev1.VMClass, id string, selector map[string]string) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := builder.VirtualMachine(f.ns, name, class.Name, "", builder.WithProviderSelector(selector), func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.AdoptProviderID = id
		vm.Spec.MigrationPolicy = banlieuev1.MigrationPolicyNever
	})
	f.create(vm)
	return vm
}

// vmEvents returns the Events recorded on the test's VirtualMachine name, by reason.
func (f *fixture) vmEvents(g Gomega, name string) map[string]eventsv1.Event {
	return eventsOn(g, "VirtualMachine", f.ns, name)
}

// eventsOn returns the Events recorded on the object of kind namespace/name, by reason.
func eventsOn(g Gomega, kind, namespace, name string) map[string]eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
	out := map[string]eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out[e.Reason] = e
		}
	}
	return out
}

// expectAdopted waits for the VM to run, Ready, with the adopted ID as its provider ID
// and the Adopted Event recorded once.
func (f *fixture) expectAdopted(vm *banlieuev1.VirtualMachine, id string, timeout time.Duration) {
	f.t.Helper()
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vm.Status.ProviderID).To(Equal(id))
	}, timeout)
	// The class was chosen to fit the VM: what the provider observes is the class's shape.
	class := &banlieuev1.VMClass{}
	f.g.Expect(k8s.Get(f.ctx, client.ObjectKey{Name: vm.Spec.ClassRef.Name}, class)).To(Succeed())
	f.g.Expect([]int64{int64(vm.Status.Hardware.CPUs), vm.Status.Hardware.MemoryMiB}).To(Equal([]int64{int64(class.Spec.Hardware.CPUs), class.Spec.Hardware.MemoryMiB}),
		"status.hardware is not the adopted VM's shape")
	f.g.Eventually(func(g Gomega) {
		e, ok := f.vmEvents(g, vm.Name)[banlieuev1.VirtualMachineAdoptedReason]
		g.Expect(ok).To(BeTrue(), "no Adopted Event on %s", vm.Name)
		g.Expect(e.Type).To(Equal(corev1.EventTypeNormal))
		g.Expect(e.Note).To(ContainSubstring("Took over backend VM " + id))
		g.Expect(e.Series).To(BeNil(), "the Adopted Event was recorded more than once")
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// retainAndDelete sets the VM's deletionPolicy to Retain, deletes it, and waits until
// neither it nor its infrastructure machine of kind is left, and the Released Event
// says so.
func (f *fixture) retainAndDelete(vm *banlieuev1.VirtualMachine, kind string, timeout time.Duration) {
	f.t.Helper()
	f.update(vm, func() { vm.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain })
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), &banlieuev1.VirtualMachine{}))
	}).WithTimeout(timeout).Should(BeTrue(), "the VirtualMachine is still there")
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(infrav1.GroupVersion.WithKind(kind))
	f.g.Expect(apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: vm.Name}, m))).To(BeTrue(), "the %s is still there", kind)
	f.g.Eventually(func(g Gomega) {
		e, ok := f.vmEvents(g, vm.Name)[banlieuev1.VirtualMachineReleasedReason]
		g.Expect(ok).To(BeTrue(), "no Released Event on %s", vm.Name)
		g.Expect(e.Note).To(ContainSubstring(vm.Status.ProviderID))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// --- vSphere ---

// vcsimVM reads the simulator's VM named name with govmomi, on the simulator's own
// session: what vCenter holds.
func vcsimVM(g Gomega, vs *vspheretest.Simulator, name string) mo.VirtualMachine {
	vms, err := vs.VMs(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	for _, vm := range vms {
		if vm.Name == name {
			return vm
		}
	}
	g.Expect(name).To(BeEmpty(), "the simulator has no VM %s", name)
	return mo.VirtualMachine{}
}

// vcsimVMByRef reads the VM ref with govmomi.
func vcsimVMByRef(g Gomega, vs *vspheretest.Simulator, ref types.ManagedObjectReference) mo.VirtualMachine {
	var vm mo.VirtualMachine
	g.Expect(property.DefaultCollector(vs.Client.Client).RetrieveOne(context.Background(), ref, []string{"name", "config", "runtime", "summary"}, &vm)).To(Succeed())
	return vm
}

// powerAndCloneEvents are the vCenter events an adoption or a release must not cause.
var powerAndCloneEvents = []string{"VmPoweredOnEvent", "VmPoweredOffEvent", "VmBeingClonedEvent", "VmClonedEvent"}

// vcenterEvents counts, by type, the powerAndCloneEvents vCenter recorded for the VM:
// its own record, which banlieue does not write.
func vcenterEvents(g Gomega, vs *vspheretest.Simulator, ref types.ManagedObjectReference) map[string]int {
	events, err := event.NewManager(vs.Client.Client).QueryEvents(context.Background(), types.EventFilterSpec{
		Entity:      &types.EventFilterSpecByEntity{Entity: ref, Recursion: types.EventFilterSpecRecursionOptionSelf},
		EventTypeId: powerAndCloneEvents,
	})
	g.Expect(err).NotTo(HaveOccurred(), "vCenter's events")
	out := map[string]int{}
	for _, e := range events {
		out[strings.TrimPrefix(fmt.Sprintf("%T", e), "*types.")]++
	}
	return out
}

// shapeVM reconfigures the VM with govmomi, as its owner would have sized it: cpus and
// memoryMiB.
func shapeVM(g Gomega, vs *vspheretest.Simulator, ref types.ManagedObjectReference, cpus int32, memoryMiB int64) {
	ctx := context.Background()
	task, err := object.NewVirtualMachine(vs.Client.Client, ref).Reconfigure(ctx, types.VirtualMachineConfigSpec{NumCPUs: cpus, MemoryMB: memoryMiB})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(task.Wait(ctx)).To(Succeed())
}

// vsphereAdoptable is govmomi's model VM name, running on the standalone host, sized by
// its owner to 2 CPUs and 2 GiB with its model 10 GiB disk, and the class that fits it.
func (f *fixture) vsphereAdoptable(vs *vspheretest.Simulator, name string) (mo.VirtualMachine, *banlieuev1.VMClass) {
	f.t.Helper()
	vm := vcsimVM(f.g, vs, name)
	shapeVM(f.g, vs, vm.Self, 2, 2048)
	vm = vcsimVMByRef(f.g, vs, vm.Self)
	f.g.Expect(vm.Runtime.PowerState).To(Equal(types.VirtualMachinePowerStatePoweredOn), "%s is not running", name)
	f.g.Expect(vspheretest.ExtraConfig(vm, vsphere.ExtraConfigMachineUID)).To(BeEmpty(), "%s carries a mark already", name)
	f.g.Expect(disksGiB(vm)).To(Equal([]int64{10}))
	class := f.class("fits-"+strings.ToLower(strings.ReplaceAll(name, "_", "-")), func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 2, 2048
		c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}
		c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
	})
	return vm, class
}

func TestAVCenterVMIsAdoptedAsItIsAndLetGoRunning(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	before, class := f.vsphereAdoptable(vs, "DC0_H0_VM0")
	events := vcenterEvents(f.g, vs, before.Self)
	// The query finds vCenter's record of the model VM's start: it sees what it looks for.
	f.g.Expect(events).To(HaveKeyWithValue("VmPoweredOnEvent", BeNumerically(">=", 1)))

	f.startProvider(vsphereConfig(nil))
	p := f.vsphereProvider(vs, enableAdoption)
	f.g.Expect(f.providerIDPrefix(p)).To(Equal("vsphere://"))
	id := p.Status.ProviderIDPrefix + before.Config.Uuid
	vm := f.adoptingVM("legacy", class, id, f.labels())
	f.expectAdopted(vm, id, 30*time.Second)
	m := f.machine("legacy")
	f.g.Expect(m.Spec.AdoptProviderID).To(Equal(id))
	f.g.Expect(m.Status.VSphere).NotTo(BeNil())
	f.g.Expect(m.Status.VSphere.MoRef).To(Equal(before.Self.Value))
	uid := string(m.UID)
	f.g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).NotTo(HavePrefix("True/"), "the class fits the VM: nothing waits")

	// govmomi: the mark, and the same VM as before, running since the same boot, and
	// vCenter recorded no power operation or clone of it.
	after := vcsimVMByRef(f.g, vs, before.Self)
	f.g.Expect(vspheretest.ExtraConfig(after, vsphere.ExtraConfigMachineUID)).To(Equal(uid))
	f.g.Expect(after.Config.Uuid).To(Equal(before.Config.Uuid))
	f.g.Expect(after.Config.InstanceUuid).To(Equal(before.Config.InstanceUuid))
	f.g.Expect(after.Runtime.PowerState).To(Equal(before.Runtime.PowerState))
	// vcsim keeps a VM's boot time in summary.runtime.bootTime only.
	f.g.Expect(before.Summary.Runtime.BootTime).NotTo(BeNil())
	f.g.Expect(after.Summary.Runtime.BootTime).NotTo(BeNil())
	f.g.Expect(after.Summary.Runtime.BootTime.Equal(*before.Summary.Runtime.BootTime)).To(BeTrue(), "booted %v, was %v", after.Summary.Runtime.BootTime, before.Summary.Runtime.BootTime)
	f.g.Expect(after.Config.Hardware.NumCPU).To(Equal(before.Config.Hardware.NumCPU))
	f.g.Expect(after.Config.Hardware.MemoryMB).To(Equal(before.Config.Hardware.MemoryMB))
	f.g.Expect(after.Config.Hardware.Device).To(HaveLen(len(before.Config.Hardware.Device)))
	f.g.Expect(vcenterEvents(f.g, vs, before.Self)).To(Equal(events), "vCenter's power and clone events of the VM")
	all, err := vs.VMs(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(slices.ContainsFunc(all, func(v mo.VirtualMachine) bool { return strings.HasPrefix(v.Name, f.ns+".") })).To(BeFalse(), "a VM was cloned")

	// Retain and delete: the VM is still there, running since the same boot, unmarked.
	f.retainAndDelete(vm, "VSphereMachine", 30*time.Second)
	released := vcsimVMByRef(f.g, vs, before.Self)
	f.g.Expect(vspheretest.ExtraConfig(released, vsphere.ExtraConfigMachineUID)).To(BeEmpty())
	f.g.Expect(released.Config.InstanceUuid).To(Equal(before.Config.InstanceUuid))
	f.g.Expect(released.Runtime.PowerState).To(Equal(types.VirtualMachinePowerStatePoweredOn))
	f.g.Expect(released.Summary.Runtime.BootTime).NotTo(BeNil())
	f.g.Expect(released.Summary.Runtime.BootTime.Equal(*before.Summary.Runtime.BootTime)).To(BeTrue(), "booted %v, was %v", released.Summary.Runtime.BootTime, before.Summary.Runtime.BootTime)
	f.g.Expect(vcenterEvents(f.g, vs, before.Self)).To(Equal(events), "vCenter's power and clone events of the VM")
}

func TestAVCenterVMAdoptedOnceIsRefusedToOthers(t *testing.T) {
	first, second, disabled := newFixture(t), newFixture(t), newFixture(t)
	vs := vspheretest.Start(t)
	target, class := first.vsphereAdoptable(vs, "DC0_H0_VM1")
	first.startProvider(vsphereConfig(nil))
	p := first.vsphereProvider(vs, enableAdoption)
	id := first.providerIDPrefix(p) + target.Config.Uuid

	// The first namespace's VM adopts it.
	a := first.adoptingVM("a", class, id, first.labels())
	first.expectAdopted(a, id, 30*time.Second)
	uid := string(first.machine("a").UID)

	// Another namespace's VM, placed on the same Provider, names the same VM: its
	// machine finds the first one's mark and leaves the VM alone.
	b := second.adoptingVM("b", class, id, first.labels())
	second.g.Eventually(func(g Gomega) {
		m := &infrav1.VSphereMachine{}
		g.Expect(k8s.Get(second.ctx, client.ObjectKey{Namespace: second.ns, Name: "b"}, m)).To(Succeed())
		g.Expect(conditionOf(m.Status.Conditions, "Ready")).To(HavePrefix("False/" + infrav1.MachineAlreadyManagedReason + ":"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	second.eventually(b, func(g Gomega) {
		g.Expect(conditionOf(b.Status.Conditions, "Ready")).To(HavePrefix("False/"))
		g.Expect(b.Status.ProviderID).To(BeEmpty())
	}, 10*time.Second)
	first.g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(first.ctx, client.ObjectKeyFromObject(a), a)).To(Succeed())
		g.Expect(conditionOf(a.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(a.Status.ProviderID).To(Equal(id))
		g.Expect(vspheretest.ExtraConfig(vcsimVMByRef(g, vs, target.Self), vsphere.ExtraConfigMachineUID)).To(Equal(uid))
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// A Provider whose adoptionPolicy is left Disabled adopts nothing, and says so.
	other := vcsimVM(disabled.g, vs, "DC0_C0_RP0_VM0")
	q := disabled.vsphereProvider(vs)
	disabled.g.Expect(q.Spec.AdoptionPolicy).NotTo(Equal(banlieuev1.AdoptionPolicyEnabled))
	otherID := disabled.providerIDPrefix(q) + other.Config.Uuid
	c := disabled.adoptingVM("c", class, otherID, disabled.labels())
	disabled.eventually(c, func(g Gomega) {
		g.Expect(conditionOf(c.Status.Conditions, "Scheduled")).To(And(
			HavePrefix("False/"+banlieuev1.VirtualMachineAdoptionNoProviderReason+": "),
			ContainSubstring(q.Namespace+"/"+q.Name),
			ContainSubstring("adoptionPolicy is not Enabled"),
		))
	}, 30*time.Second)
	disabled.g.Expect(apierrors.IsNotFound(k8s.Get(disabled.ctx, client.ObjectKey{Namespace: disabled.ns, Name: "c"}, &infrav1.VSphereMachine{}))).To(BeTrue(), "a machine was made")
	disabled.g.Expect(vspheretest.ExtraConfig(vcsimVMByRef(disabled.g, vs, other.Self), vsphere.ExtraConfigMachineUID)).To(BeEmpty())
}

// --- Proxmox ---

// Its owner's tags and notes on the VM made on PVE directly, which banlieue keeps.
const (
	pveOwnerTags  = "prod;web"
	pveOwnerNotes = "Owner: team web\nBacked up nightly.\n"
)

// pveAPI is a go-proxmox client of the simulator: the VM's owner and the witness, not
// the driver.
func pveAPI(pve *proxmoxtest.Simulator) *goproxmox.Client {
	return goproxmox.NewClient(pve.URL, goproxmox.WithHTTPClient(pve.HTTPClient()), goproxmox.WithAPIToken(pve.TokenID, pve.TokenSecret))
}

// pveVMState is what the PVE API says of a VM: its config's marks and its run status.
type pveVMState struct {
	Tags, Description string
	Status            string
	PID, Uptime       int
}

// pveRead reads the VM's config and current status through the PVE API.
func pveRead(g Gomega, api *goproxmox.Client, node string, vmid int) pveVMState {
	ctx := context.Background()
	var conf map[string]any
	g.Expect(api.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid), &conf)).To(Succeed())
	var st struct {
		Status string `json:"status"`
		PID    int    `json:"pid"`
		Uptime int    `json:"uptime"`
	}
	g.Expect(api.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", node, vmid), &st)).To(Succeed())
	str := func(k string) string {
		if v, ok := conf[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	return pveVMState{Tags: str("tags"), Description: str("description"), Status: st.Status, PID: st.PID, Uptime: st.Uptime}
}

// pveTags splits PVE's tag list.
func pveTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// pveWaitTask waits for the task upid to end.
func pveWaitTask(g Gomega, api *goproxmox.Client, upid string) {
	node := strings.Split(upid, ":")[1]
	g.Eventually(func(g Gomega) {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		g.Expect(api.Get(context.Background(), "/nodes/"+node+"/tasks/"+upid+"/status", &st)).To(Succeed())
		g.Expect(st.Status).To(Equal("stopped"))
		g.Expect(st.ExitStatus).To(Equal("OK"))
	}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
}

// pvePowerTasks are the simulator's tasks that start, stop, pause or reboot a VM.
func pvePowerTasks(pve *proxmoxtest.Simulator) []string {
	var out []string
	for _, tk := range pve.Tasks() {
		if slices.Contains([]string{"qmstart", "qmstop", "qmshutdown", "qmreboot", "qmsuspend", "qmresume", "qmreset", "qmclone"}, tk.Type) {
			out = append(out, tk.Type+" "+tk.UPID)
		}
	}
	return out
}

func TestAProxmoxVMIsAdoptedAsItIsAndLetGoRunning(t *testing.T) {
	proxmoxer.Require(t)
	f := newFixture(t)
	pve := startPVE(t)
	api := pveAPI(pve)

	// The owner makes a running VM on PVE directly: 2 cores, 2 GiB, a 20 GiB disk on
	// the storage the tests' "fast" class names, a NIC, their tags and notes.
	var next string
	f.g.Expect(api.Get(f.ctx, "/cluster/nextid", &next)).To(Succeed())
	vmid, err := strconv.Atoi(strings.TrimSpace(next))
	f.g.Expect(err).NotTo(HaveOccurred())
	var upid string
	f.g.Expect(api.Post(f.ctx, "/nodes/"+proxmoxtest.Node1+"/qemu", map[string]any{
		"vmid": vmid, "name": "legacy-" + next, "cores": 2, "memory": 2048, "agent": 1,
		"scsi0": proxmoxtest.Storage + ":20", "net0": "virtio,bridge=" + proxmoxtest.Bridge,
		"tags": pveOwnerTags, "description": pveOwnerNotes, "start": 1,
	}, &upid)).To(Succeed())
	pveWaitTask(f.g, api, upid)
	before := pveRead(f.g, api, proxmoxtest.Node1, vmid)
	f.g.Expect(before.Status).To(Equal("running"))
	f.g.Expect(before.PID).NotTo(BeZero())
	powerTasks := pvePowerTasks(pve)
	class := f.class("fits", func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 2, 2048
		c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 20, StorageClass: "fast"}}
		c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
	})

	f.startProvider(proxmoxConfig())
	p := f.proxmoxProvider(pve, enableAdoption)
	f.g.Expect(f.providerIDPrefix(p)).To(Equal("proxmox://" + proxmoxtest.Cluster + "/"))
	id := p.Status.ProviderIDPrefix + strconv.Itoa(vmid)
	vm := f.adoptingVM("legacy", class, id, f.labels())
	f.expectAdopted(vm, id, 30*time.Second)
	uid := f.machineUIDOf("ProxmoxMachine", "legacy")
	f.g.Expect(f.vmid("legacy")).To(Equal(vmid))

	// The PVE API: the machine's tag beside the owner's, its UID after the owner's notes,
	// and the VM running in the same QEMU process, its uptime never reset.
	after := pveRead(f.g, api, proxmoxtest.Node1, vmid)
	f.g.Expect(pveTags(after.Tags)).To(ConsistOf("prod", "web", proxmox.TagPrefix+uid, proxmox.ClusterTagPrefix+f.clusterID(), proxmox.AdoptedTag))
	f.g.Expect(after.Description).To(HavePrefix(pveOwnerNotes))
	f.g.Expect(after.Description).To(ContainSubstring(proxmox.DescriptionUIDKey + uid))
	f.g.Expect(after.Status).To(Equal("running"))
	f.g.Expect(after.PID).To(Equal(before.PID), "the VM runs in another QEMU process")
	f.g.Expect(after.Uptime).To(BeNumerically(">=", before.Uptime), "the VM's uptime was reset")
	f.g.Expect(pvePowerTasks(pve)).To(Equal(powerTasks), "power or clone tasks since the VM was made")
	{
		px := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, vmid)
		t.Logf("proxmoxer reads the adopted VM: %+v", px)
		f.g.Expect(pveTags(px.Tags)).To(ContainElement(proxmox.TagPrefix + uid))
		f.g.Expect(px.Description).To(ContainSubstring(proxmox.DescriptionUIDKey + uid))
		f.g.Expect(px.Status).To(Equal("running"))
		f.g.Expect(px.PID).To(Equal(before.PID))
	}

	// Retain and delete: the VM runs on in the same process, with the owner's tags and
	// notes and none of banlieue's.
	f.retainAndDelete(vm, "ProxmoxMachine", 30*time.Second)
	released := pveRead(f.g, api, proxmoxtest.Node1, vmid)
	f.g.Expect(pveTags(released.Tags)).To(ConsistOf("prod", "web"))
	f.g.Expect(released.Description).NotTo(ContainSubstring(uid))
	f.g.Expect(released.Description).To(HavePrefix(strings.TrimSpace(pveOwnerNotes)))
	f.g.Expect(released.Status).To(Equal("running"))
	f.g.Expect(released.PID).To(Equal(before.PID), "the released VM runs in another QEMU process")
	f.g.Expect(released.Uptime).To(BeNumerically(">=", after.Uptime))
	f.g.Expect(pvePowerTasks(pve)).To(Equal(powerTasks), "power or clone tasks since the VM was made")
	{
		px := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, vmid)
		t.Logf("proxmoxer reads the released VM: %+v", px)
		f.g.Expect(pveTags(px.Tags)).NotTo(ContainElement(proxmox.TagPrefix + uid))
		f.g.Expect(px.Description).NotTo(ContainSubstring(uid))
		f.g.Expect(px.Status).To(Equal("running"))
		f.g.Expect(px.PID).To(Equal(before.PID))
	}
}

// --- libvirt ---

// lvMustVirsh runs virsh and fails the test when it fails.
func lvMustVirsh(t *testing.T, d *libvirtd.Daemon, args ...string) string {
	t.Helper()
	out, err := d.Virsh(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lvMarkUID is the machine UID in banlieue's element of the domain's metadata, as
// virsh reads it from part (--live or --config); "" with virsh's error when there is
// none.
func lvMarkUID(t *testing.T, d *libvirtd.Daemon, domain, part string) (string, error) {
	t.Helper()
	out, err := d.Virsh("metadata", domain, "--uri", libvirt.MetadataNamespace, part)
	if err != nil {
		return "", err
	}
	var el struct {
		UID string `xml:"uid"`
	}
	if err := xml.Unmarshal([]byte(out), &el); err != nil {
		t.Fatalf("virsh's metadata %q does not parse: %v", out, err)
	}
	return el.UID, nil
}

// defineRunningDomain defines and starts, through libvirt directly, a TCG domain of 2
// vCPUs and 192 MiB with a 1 GiB root volume of the test pool and a NIC on the test
// network, as someone other than banlieue would. It returns its name and UUID, and
// removes it when the test ends.
func defineRunningDomain(t *testing.T, d *libvirtd.Daemon) (name, id string) {
	t.Helper()
	suffix := uuid.NewString()[:8]
	name, id = "legacy-"+suffix, uuid.NewString()
	root := name + "-root.qcow2"
	if err := d.CreateBlankImage(lvPool, root, 1); err != nil {
		t.Fatal(err)
	}
	x, err := (&libvirtxml.Domain{
		Type: libvirt.TCG, Name: name, UUID: id,
		Memory:        &libvirtxml.DomainMemory{Value: 192, Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: 192, Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
		OS:            &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
				Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: lvPool, Volume: root}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
			}},
			Interfaces: []libvirtxml.DomainInterface{{
				Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: lvNetwork}},
				Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
			}},
		},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Connect("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Disconnect() }()
	dom, err := l.DomainDefineXMLFlags(x, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DomainCreate(dom); err != nil {
		t.Fatalf("start the domain: %v", err)
	}
	t.Cleanup(func() {
		l, err := d.Connect("qemu:///system")
		if err != nil {
			return
		}
		defer func() { _ = l.Disconnect() }()
		if dom, err := l.DomainLookupByName(name); err == nil {
			_ = l.DomainDestroy(dom)
			_ = l.DomainUndefine(dom)
		}
	})
	return name, id
}

func TestALibvirtDomainIsAdoptedAsItIsAndLetGoRunning(t *testing.T) {
	f := newFixture(t)
	d := startLibvirtd(t)
	name, domUUID := defineRunningDomain(t, d)
	beforeID := lvMustVirsh(t, d, "domid", domUUID)
	f.g.Expect(beforeID).NotTo(Equal("-"), "the domain does not run")
	f.g.Expect(lvMustVirsh(t, d, "domstate", domUUID)).To(Equal("running"))
	class := f.class("fits", func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 2, 192
		c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 1, StorageClass: "fast"}}
		c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
	})

	f.startProvider(libvirtConfig())
	p := f.libvirtProvider(d)
	f.update(p, func() { p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled })
	prefix := f.providerIDPrefix(p)
	f.g.Expect(prefix).To(Equal("libvirt://" + lvMustVirsh(t, d, "hostname") + "/"))
	id := prefix + domUUID
	vm := f.adoptingVM("legacy", class, id, f.labels())
	f.expectAdopted(vm, id, 60*time.Second)
	uid := f.machineUIDOf("LibvirtMachine", "legacy")
	f.g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).NotTo(HavePrefix("True/"), "the class fits the domain: nothing waits")

	// virsh: the mark in the live and persistent definitions, the same domain (its ID
	// changes on every start), still running; no domain of banlieue's beside it.
	for _, part := range []string{"--live", "--config"} {
		got, err := lvMarkUID(t, d, domUUID, part)
		f.g.Expect(err).NotTo(HaveOccurred(), "virsh metadata %s", part)
		f.g.Expect(got).To(Equal(uid), "virsh metadata %s", part)
	}
	f.g.Expect(lvMustVirsh(t, d, "domid", domUUID)).To(Equal(beforeID), "the domain was restarted")
	f.g.Expect(lvMustVirsh(t, d, "domstate", domUUID)).To(Equal("running"))
	f.g.Expect(domains(f.g, d)).To(ConsistOf(name))

	// Retain and delete: the domain runs on, the same, without the mark.
	f.retainAndDelete(vm, "LibvirtMachine", 60*time.Second)
	for _, part := range []string{"--live", "--config"} {
		got, err := lvMarkUID(t, d, domUUID, part)
		f.g.Expect(err).To(HaveOccurred(), "virsh metadata %s after the release: UID %q", part, got)
	}
	f.g.Expect(lvMustVirsh(t, d, "domid", domUUID)).To(Equal(beforeID), "the released domain was restarted")
	f.g.Expect(lvMustVirsh(t, d, "domstate", domUUID)).To(Equal("running"))
	f.g.Expect(domains(f.g, d)).To(ConsistOf(name))
	f.g.Expect(volumes(f.g, d)).To(ContainElement(name + "-root.qcow2"))
}
