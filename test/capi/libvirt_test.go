package capi

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/sim/libvirtd"
	"github.com/banlieue/banlieue/test/testenv"
)

// Scenarios (a) and (d) on libvirt: Cluster API's Machine with bootstrap data on a
// LibvirtMachine with neither data nor failure domain reaches Provisioned, the bootstrap
// data on the NoCloud seed ISO in the daemon's pool; the Machine's deletion leaves no
// domain and none of the machine's volumes.
func TestAMachineWithBootstrapDataIsProvisionedOnLibvirt(t *testing.T) {
	f := newFixture(t)
	const pool, image, network = "banlieue", "jammy.qcow2", "banlieue"
	d := libvirtd.StartT(t, libvirtd.Options{})
	poolDir, err := d.DefineDirPool(pool)
	f.g.Expect(err).NotTo(HaveOccurred())
	_, err = d.DefineTestNetwork(network, "bnlc")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(d.CreateBlankImage(pool, image, 1)).To(Succeed())
	c := libvirt.Config(libvirt.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval, c.ImageResync = 2*time.Second, 2*time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	f.startProvider(c)
	p := builder.Provider(f.ns, "kvm", libvirt.ProviderClass,
		builder.WithConnection(banlieuev1.Connection{Endpoint: d.QEMUURI()}),
		builder.WithTestClasses(libvirt.TargetPool, pool, libvirt.TargetNetwork, network, network),
		// TCG, so that it runs on any host.
		builder.WithParameters(map[string]string{libvirt.ParamPool: pool, libvirt.ParamDomainType: "qemu"}),
	)
	f.create(p)
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition)).To(HavePrefix("True/"))
		g.Expect(p.Status.FailureDomains).To(HaveLen(1))
	})
	fd := p.Status.FailureDomains[0].Name
	img := f.image(builder.BackingFile(libvirt.ProviderClass, pool+"/"+image))

	f.cluster("kvm")
	const userData = "#cloud-config\nhostname: kvm-0\n"
	f.bootstrapSecret("kvm", "kvm-0-bootstrap", userData)
	infra := &infrav1.LibvirtMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "kvm-0", Labels: map[string]string{clusterNameLabel: "kvm"}},
		Spec:       infrav1.LibvirtMachineSpec{MachineSpec: machineSpec(p, img)},
	}
	f.create(infra)
	m := f.machine("kvm", "kvm-0", "LibvirtMachine", "kvm-0", "kvm-0-bootstrap", fd)
	f.eventuallyCAPI(m, func(g Gomega, m *unstructured.Unstructured) { provisioned(g, m, "libvirt://", fd) }, 2*time.Minute)
	f.eventually(infra, func(g Gomega) {
		g.Expect(infra.Status.FailureDomain).To(Equal(fd))
		g.Expect(metav1.IsControlledBy(infra, m)).To(BeTrue(), "the LibvirtMachine's controller is the Machine")
	})
	uid := string(infra.UID)
	providerID, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
	f.g.Expect(providerID).To(HaveSuffix("/" + uid))

	// The bootstrap data is on the seed ISO in the pool, read from the pool's folder.
	iso, err := os.ReadFile(filepath.Join(poolDir, uid+"-cidata.iso"))
	f.g.Expect(err).NotTo(HaveOccurred())
	files, label, err := nocloud.ReadISO(iso)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(label).To(Equal("cidata"))
	f.g.Expect(string(files["user-data"])).To(Equal(userData))

	f.g.Expect(k8s.Delete(f.ctx, m)).To(Succeed())
	f.gone(m, 90*time.Second)
	f.gone(infra, 30*time.Second)
	entries, err := os.ReadDir(poolDir)
	f.g.Expect(err).NotTo(HaveOccurred())
	left := make([]string, 0, len(entries))
	for _, e := range entries {
		left = append(left, e.Name())
	}
	f.g.Expect(left).To(ConsistOf(image), "the pool keeps the image and none of the machine's volumes")
	l, err := d.Connect("qemu:///system")
	f.g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Disconnect() }()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(doms).To(BeEmpty(), "libvirt domains left after the Machine's deletion")
}
