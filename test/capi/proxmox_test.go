package capi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	"github.com/banlieue/banlieue/test/testenv"
)

// Scenarios (a) and (d) on Proxmox VE: Cluster API's Machine with bootstrap data on a
// ProxmoxMachine with neither data nor failure domain reaches Provisioned on the
// Machine's node, the bootstrap data on the NoCloud seed ISO the provider uploaded; the
// Machine's deletion leaves neither VM nor ISO.
func TestAMachineWithBootstrapDataIsProvisionedOnProxmox(t *testing.T) {
	f := newFixture(t)
	pve := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.Bridges = []string{proxmoxtest.Bridge, "vmbr1"}
		o.GuestAgentDelay = 200 * time.Millisecond
	})
	c := proxmox.Config(proxmox.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval, c.ImageResync = 2*time.Second, 2*time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	f.startProvider(c)
	secret := pve.TokenCredentialsSecret(f.ns, "pve")
	f.create(secret)
	p := builder.Provider(f.ns, "pve", proxmox.ProviderClass,
		builder.WithConnection(pve.Connection(secret.Name)),
		builder.WithTestClasses("storage", proxmoxtest.Storage, "bridge", proxmoxtest.Bridge, "vmbr1"),
		builder.WithParameters(map[string]string{"node": proxmoxtest.Node1}),
	)
	f.create(p)
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition)).To(HavePrefix("True/"))
	})
	img := f.image(builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName))

	f.cluster("edge")
	const userData = "#cloud-config\nhostname: edge-0\n"
	f.bootstrapSecret("edge", "edge-0-bootstrap", userData)
	infra := &infrav1.ProxmoxMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "edge-0", Labels: map[string]string{clusterNameLabel: "edge"}},
		Spec:       infrav1.ProxmoxMachineSpec{MachineSpec: machineSpec(p, img)},
	}
	f.create(infra)
	m := f.machine("edge", "edge-0", "ProxmoxMachine", "edge-0", "edge-0-bootstrap", proxmoxtest.Node1)
	f.eventuallyCAPI(m, func(g Gomega, m *unstructured.Unstructured) {
		provisioned(g, m, "proxmox://", proxmoxtest.Node1)
		g.Expect(addresses(m)).NotTo(BeEmpty(), "the guest agent's addresses")
	}, 90*time.Second)
	f.eventually(infra, func(g Gomega) {
		g.Expect(infra.Status.Proxmox).NotTo(BeNil())
		g.Expect(infra.Status.FailureDomain).To(Equal(proxmoxtest.Node1))
		g.Expect(metav1.IsControlledBy(infra, m)).To(BeTrue(), "the ProxmoxMachine's controller is the Machine")
	})
	id := int(infra.Status.Proxmox.VMID)
	providerID, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
	f.g.Expect(providerID).To(Equal(fmt.Sprintf("proxmox://%s/%d", proxmoxtest.Cluster, id)))

	// The bootstrap data is on the seed ISO attached to the VM, read from the node's
	// storage itself.
	conf, ok := pve.VM(id)
	f.g.Expect(ok).To(BeTrue(), "VM %d on the cluster", id)
	volid, _, _ := strings.Cut(conf["ide2"], ",")
	iso, ok := pve.Volume(proxmoxtest.Node1, volid)
	f.g.Expect(ok).To(BeTrue(), "seed %q on %s", volid, proxmoxtest.Node1)
	files, label, err := nocloud.ReadISO(iso)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(label).To(Equal("cidata"))
	f.g.Expect(string(files["user-data"])).To(Equal(userData))

	f.g.Expect(k8s.Delete(f.ctx, m)).To(Succeed())
	f.gone(m, 90*time.Second)
	f.gone(infra, 30*time.Second)
	_, ok = pve.VM(id)
	f.g.Expect(ok).To(BeFalse(), "VM %d is still on the cluster", id)
	_, ok = pve.Volume(proxmoxtest.Node1, volid)
	f.g.Expect(ok).To(BeFalse(), "seed %s is still on the node", volid)
}
