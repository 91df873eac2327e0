package capi

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

// The simulated vCenter's two compute clusters are the Provider's two failure domains.
const (
	fd0, fd1           = "dc0-dc0-c0", "dc0-dc0-c1"
	cluster0, cluster1 = "DC0_C0", "DC0_C1"
)

// clusterOfFD is the vCenter cluster of each failure domain.
var clusterOfFD = map[string]string{fd0: cluster0, fd1: cluster1}

// vsphereRig is a test's vcsim with two clusters, a Provider for it, and banlieue's
// vSphere provider controller.
type vsphereRig struct {
	*fixture
	vs  *vspheretest.Simulator
	p   *banlieuev1.Provider
	img *banlieuev1.VMImage
}

func newVSphereRig(t *testing.T) *vsphereRig {
	t.Helper()
	f := newFixture(t)
	vs := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Cluster = 2 }))
	c := vsphere.Config(vsphere.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval = 2 * time.Second
	c.ImageResync = 2 * time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	f.startProvider(c)
	secret := vs.CredentialsSecret(f.ns, "vcenter")
	f.create(secret)
	p := builder.Provider(f.ns, "vcenter", vsphere.ProviderClass,
		builder.WithConnection(vs.Connection(secret.Name)),
		builder.WithTestClasses("datastore", vspheretest.Datastore, "network", vspheretest.Network, vspheretest.PortGroup),
		builder.WithParameters(map[string]string{"datacenter": vspheretest.Datacenter}),
	)
	f.create(p)
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition)).To(HavePrefix("True/"))
		names := make([]string, 0, len(p.Status.FailureDomains))
		for _, d := range p.Status.FailureDomains {
			names = append(names, d.Name)
		}
		g.Expect(names).To(ConsistOf(fd0, fd1))
	})
	img := f.image(builder.Template(vsphere.ProviderClass, vspheretest.TemplateName))
	return &vsphereRig{fixture: f, vs: vs, p: p, img: img}
}

// workerTemplate is the name of the tests' VSphereMachineTemplate.
const workerTemplate = "worker"

// template creates the VSphereMachineTemplate workerTemplate, with no failure domain: the
// Machines made from it carry theirs.
func (r *vsphereRig) template() {
	r.t.Helper()
	r.create(&infrav1.VSphereMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: workerTemplate},
		Spec: infrav1.VSphereMachineTemplateSpec{Template: infrav1.VSphereMachineTemplateResource{
			Spec: infrav1.VSphereMachineSpec{MachineSpec: machineSpec(r.p, r.img)},
		}},
	})
}

// standalone creates a VSphereMachine named name for cluster, labelled as Cluster API
// labels the machines it makes, and a Machine on it in failure domain fd with bootstrap
// data userData, and waits until Cluster API reports the Machine Provisioned.
func (r *vsphereRig) standalone(cluster, name, fd, userData string) (*unstructured.Unstructured, *infrav1.VSphereMachine) {
	r.t.Helper()
	r.bootstrapSecret(cluster, name+"-bootstrap", userData)
	vm := &infrav1.VSphereMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name, Labels: map[string]string{clusterNameLabel: cluster}},
		Spec:       infrav1.VSphereMachineSpec{MachineSpec: machineSpec(r.p, r.img)},
	}
	r.create(vm)
	m := r.machine(cluster, name, "VSphereMachine", name, name+"-bootstrap", fd)
	r.eventuallyCAPI(m, func(g Gomega, m *unstructured.Unstructured) { provisioned(g, m, "vsphere://", fd) }, 90*time.Second)
	r.g.Expect(k8s.Get(r.ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
	return m, vm
}

// why describes an infrastructure machine's state, for a failure's message.
func (r *vsphereRig) why(vm *infrav1.VSphereMachine) func() string {
	return func() string {
		if err := k8s.Get(r.ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err.Error()
		}
		out := make([]string, 0, len(vm.Status.Conditions))
		for _, c := range vm.Status.Conditions {
			out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason+": "+c.Message)
		}
		return fmt.Sprintf("VSphereMachine %s: failureDomain %q, owners %v, conditions %v", vm.Name, vm.Status.FailureDomain, vm.OwnerReferences, out)
	}
}

// theVM is vCenter's one VM of the infrastructure machine with the UID.
func (r *vsphereRig) theVM(g Gomega, uid string) mo.VirtualMachine {
	vms, err := r.vs.VMsWithUID(r.ctx, uid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vms).To(HaveLen(1), "VMs in vCenter carrying machine UID %s", uid)
	return vms[0]
}

// banlieueVMs counts vCenter's VMs that carry a machine UID: those banlieue made.
func (r *vsphereRig) banlieueVMs(g Gomega) int {
	vms, err := r.vs.VMs(r.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, vm := range vms {
		if vm.Config != nil && !vm.Config.Template && vspheretest.ExtraConfig(vm, vsphere.ExtraConfigMachineUID) != "" {
			n++
		}
	}
	return n
}

// infraMachine reads the VSphereMachine of a Cluster API Machine.
func (r *vsphereRig) infraMachine(g Gomega, m *unstructured.Unstructured) *infrav1.VSphereMachine {
	vm := &infrav1.VSphereMachine{}
	g.Expect(k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: infraName(m)}, vm)).To(Succeed())
	return vm
}

// Scenario (a): Cluster API's Machine, with bootstrap data and a failure domain, on a
// VSphereMachine with neither: the VM carries the bootstrap data in guestinfo and runs in
// the Machine's failure domain, and the Machine reaches Provisioned with the providerID
// and the guest's address.
func TestAMachineWithBootstrapDataIsProvisionedOnVCenter(t *testing.T) {
	r := newVSphereRig(t)
	r.cluster("web")
	const userData = "#cloud-config\nhostname: web-0\n"
	r.bootstrapSecret("web", "web-0-bootstrap", userData)
	infra := &infrav1.VSphereMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "web-0", Labels: map[string]string{clusterNameLabel: "web"}},
		Spec:       infrav1.VSphereMachineSpec{MachineSpec: machineSpec(r.p, r.img)},
	}
	r.create(infra)
	m := r.machine("web", "web-0", "VSphereMachine", "web-0", "web-0-bootstrap", fd1)

	// The VM exists; its guest reports an address, as VMware Tools would.
	var vm mo.VirtualMachine
	r.g.Eventually(func(g Gomega) { vm = r.theVM(g, string(infra.UID)) }).WithTimeout(90*time.Second).Should(Succeed(), r.why(infra))
	r.g.Expect(r.vs.SetGuestIP(r.ctx, vm.Self.Value, "192.0.2.31")).To(Succeed())

	r.eventuallyCAPI(m, func(g Gomega, m *unstructured.Unstructured) {
		provisioned(g, m, "vsphere://", fd1)
		g.Expect(addresses(m)).To(ContainElement("InternalIP/192.0.2.31"))
	}, 90*time.Second)
	vm = r.theVM(r.g, string(infra.UID))
	id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
	r.g.Expect(id).To(Equal("vsphere://" + vm.Config.Uuid))

	// The bootstrap data is the VM's user data, read from vCenter itself.
	got, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(vm, "guestinfo.userdata"))
	r.g.Expect(err).NotTo(HaveOccurred())
	r.g.Expect(string(got)).To(Equal(userData))
	// The VM runs in the Machine's failure domain, and the machine reports it.
	r.g.Expect(clusterOf(r.g, r.vs.Client.Client, vm)).To(Equal(cluster1))
	r.eventually(infra, func(g Gomega) {
		g.Expect(infra.Status.FailureDomain).To(Equal(fd1))
		g.Expect(conditionOf(infra.Status.Conditions, banlieuev1.ReadyCondition)).To(HavePrefix("True/"))
		g.Expect(metav1.IsControlledBy(infra, m)).To(BeTrue(), "the VSphereMachine's controller is the Machine")
	})
}

// Scenario (b): Cluster API spreads workers over failure domains with a MachineDeployment
// per domain (2 + 1) from one VSphereMachineTemplate without a failure domain; each VM
// runs in its Machine's domain; scaling to 1 and then 0 leaves no VM.
func TestMachineDeploymentsOverTwoFailureDomainsScaleToZero(t *testing.T) {
	r := newVSphereRig(t)
	r.cluster("workers")
	r.bootstrapSecret("workers", "workers-bootstrap", "#cloud-config\n")
	r.template()
	mds := map[string]*unstructured.Unstructured{
		fd0: r.machineDeployment("workers", "md-0", 2, fd0, "workers-bootstrap"),
		fd1: r.machineDeployment("workers", "md-1", 1, fd1, "workers-bootstrap"),
	}

	r.g.Eventually(func(g Gomega) {
		managerRunning(t)
		perFD := map[string]int{}
		for _, m := range r.machines(g, map[string]string{clusterNameLabel: "workers"}) {
			fd, _, _ := unstructured.NestedString(m.Object, "spec", "failureDomain")
			provisioned(g, &m, "vsphere://", fd)
			infra := r.infraMachine(g, &m)
			g.Expect(clusterOf(g, r.vs.Client.Client, r.theVM(g, string(infra.UID)))).To(Equal(clusterOfFD[fd]), "the vCenter cluster of Machine %s's VM", m.GetName())
			g.Expect(infra.Status.FailureDomain).To(Equal(fd))
			perFD[fd]++
		}
		g.Expect(perFD).To(Equal(map[string]int{fd0: 2, fd1: 1}))
		g.Expect(r.banlieueVMs(g)).To(Equal(3))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())

	for _, step := range []struct {
		replicas map[string]int
		total    int
	}{
		{map[string]int{fd0: 1, fd1: 0}, 1},
		{map[string]int{fd0: 0, fd1: 0}, 0},
	} {
		for fd, n := range step.replicas {
			r.scale(mds[fd], n)
		}
		r.g.Eventually(func(g Gomega) {
			managerRunning(t)
			g.Expect(r.machines(g, map[string]string{clusterNameLabel: "workers"})).To(HaveLen(step.total))
			list := &infrav1.VSphereMachineList{}
			g.Expect(k8s.List(r.ctx, list, client.InNamespace(r.ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(step.total))
			g.Expect(r.banlieueVMs(g)).To(Equal(step.total), "banlieue's VMs on vCenter")
		}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "scaled to %v", step.replicas)
	}
}

// Scenario (c): a paused Cluster holds a power change of its machine until it is
// unpaused, whether paused by spec.paused or by the annotation, and the machine says so.
func TestAPausedClusterHoldsAPowerChange(t *testing.T) {
	r := newVSphereRig(t)
	cluster := r.cluster("paused")
	_, infra := r.standalone("paused", "db-0", fd0, "#cloud-config\n")
	vmPower := func(g Gomega) types.VirtualMachinePowerState {
		return r.theVM(g, string(infra.UID)).Runtime.PowerState
	}
	r.g.Expect(vmPower(r.g)).To(Equal(types.VirtualMachinePowerStatePoweredOn))

	for _, tc := range []struct {
		name            string
		pause, unpause  string // merge patches of the Cluster
		power           banlieuev1.PowerState
		held, afterward types.VirtualMachinePowerState
	}{
		{"spec.paused", `{"spec":{"paused":true}}`, `{"spec":{"paused":false}}`,
			banlieuev1.PowerStatePoweredOff, types.VirtualMachinePowerStatePoweredOn, types.VirtualMachinePowerStatePoweredOff},
		{"the paused annotation", `{"metadata":{"annotations":{"cluster.x-k8s.io/paused":""}}}`, `{"metadata":{"annotations":{"cluster.x-k8s.io/paused":null}}}`,
			banlieuev1.PowerStatePoweredOn, types.VirtualMachinePowerStatePoweredOff, types.VirtualMachinePowerStatePoweredOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(k8s.Patch(r.ctx, cluster, client.RawPatch("application/merge-patch+json", []byte(tc.pause)))).To(Succeed())
			r.eventually(infra, func(g Gomega) {
				g.Expect(conditionOf(infra.Status.Conditions, infrav1.MachinePausedCondition)).To(HavePrefix("True/"))
			})
			g.Expect(k8s.Patch(r.ctx, infra, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"powerState":"`+string(tc.power)+`"}}`)))).To(Succeed())
			g.Consistently(vmPower).WithTimeout(5*time.Second).WithPolling(500*time.Millisecond).Should(Equal(tc.held), "the VM's power while the Cluster is paused")
			g.Expect(k8s.Patch(r.ctx, cluster, client.RawPatch("application/merge-patch+json", []byte(tc.unpause)))).To(Succeed())
			g.Eventually(vmPower).WithTimeout(60*time.Second).WithPolling(500*time.Millisecond).Should(Equal(tc.afterward), "the VM's power once the Cluster is unpaused")
			r.eventually(infra, func(g Gomega) {
				g.Expect(conditionOf(infra.Status.Conditions, infrav1.MachinePausedCondition)).NotTo(HavePrefix("True/"))
				g.Expect(infra.Status.PowerState).To(Equal(tc.power))
			})
		})
	}
}

// Scenario (d): deleting a Machine deletes its VSphereMachine and VM; deleting a Cluster
// deletes its MachineDeployment's Machines, their VSphereMachines and VMs.
func TestMachineAndClusterDeletionLeaveNothing(t *testing.T) {
	r := newVSphereRig(t)
	cluster := r.cluster("gone")
	m, infra := r.standalone("gone", "lone", fd0, "#cloud-config\n")
	r.g.Expect(k8s.Delete(r.ctx, m)).To(Succeed())
	r.gone(m, 90*time.Second)
	r.gone(infra, 30*time.Second)
	vms, err := r.vs.VMsWithUID(r.ctx, string(infra.UID))
	r.g.Expect(err).NotTo(HaveOccurred())
	r.g.Expect(vms).To(BeEmpty(), "VMs left on vCenter after the Machine's deletion")

	r.bootstrapSecret("gone", "gone-bootstrap", "#cloud-config\n")
	r.template()
	r.machineDeployment("gone", "md", 2, fd1, "gone-bootstrap")
	r.g.Eventually(func(g Gomega) {
		managerRunning(t)
		ms := r.machines(g, map[string]string{clusterNameLabel: "gone"})
		g.Expect(ms).To(HaveLen(2))
		for _, m := range ms {
			provisioned(g, &m, "vsphere://", fd1)
		}
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	r.g.Expect(k8s.Delete(r.ctx, cluster)).To(Succeed())
	r.gone(cluster, 3*time.Minute)
	r.g.Eventually(func(g Gomega) {
		g.Expect(r.machines(g, nil)).To(BeEmpty())
		list := &infrav1.VSphereMachineList{}
		g.Expect(k8s.List(r.ctx, list, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		g.Expect(r.banlieueVMs(g)).To(BeZero(), "banlieue's VMs on vCenter")
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

// Scenario (e): remediation as a MachineHealthCheck does it: deleting a Machine of a
// MachineSet makes the MachineSet create a new one, and the old VM goes.
func TestADeletedMachineOfAMachineSetIsReplaced(t *testing.T) {
	r := newVSphereRig(t)
	r.cluster("heal")
	r.bootstrapSecret("heal", "heal-bootstrap", "#cloud-config\n")
	r.template()
	r.machineDeployment("heal", "md", 2, fd0, "heal-bootstrap")
	ready := func(g Gomega) []unstructured.Unstructured {
		managerRunning(t)
		ms := r.machines(g, map[string]string{clusterNameLabel: "heal"})
		g.Expect(ms).To(HaveLen(2))
		for _, m := range ms {
			provisioned(g, &m, "vsphere://", fd0)
		}
		g.Expect(r.banlieueVMs(g)).To(Equal(2))
		return ms
	}
	var before []unstructured.Unstructured
	r.g.Eventually(func(g Gomega) { before = ready(g) }).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	victim := before[0]
	oldInfra := r.infraMachine(r.g, &victim)
	r.g.Expect(k8s.Delete(r.ctx, &victim)).To(Succeed())

	r.g.Eventually(func(g Gomega) {
		after := ready(g)
		names := []string{after[0].GetName(), after[1].GetName()}
		g.Expect(slices.Contains(names, victim.GetName())).To(BeFalse(), "the deleted Machine %s is still there", victim.GetName())
		vms, err := r.vs.VMsWithUID(context.Background(), string(oldInfra.UID))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(vms).To(BeEmpty(), "the deleted Machine's VM is still on vCenter")
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
