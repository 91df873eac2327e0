package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/sim/libvirtd"
	"github.com/banlieue/banlieue/test/testenv"
)

// The libvirt objects each test's daemon has.
const (
	lvPool, lvImage, lvNetwork = "banlieue", "jammy.qcow2", "banlieue"
)

// startLibvirtd starts a private libvirtd for the test with a pool, a blank image and
// a network on a benchmarking subnet.
func startLibvirtd(t *testing.T) *libvirtd.Daemon {
	t.Helper()
	d := libvirtd.StartT(t, libvirtd.Options{})
	if _, err := d.DefineDirPool(lvPool); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DefineTestNetwork(lvNetwork, "bnle"); err != nil {
		t.Fatal(err)
	}
	if err := d.CreateBlankImage(lvPool, lvImage, 1); err != nil {
		t.Fatal(err)
	}
	return d
}

// libvirtConfig is the libvirt provider with intervals short enough for tests.
func libvirtConfig() providersdk.Config {
	c := libvirt.Config(libvirt.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval, c.ImageResync = 2*time.Second, 2*time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	return c
}

// libvirtProvider creates a Provider for the daemon's QEMU driver (TCG, so it runs on
// any host) with the test classes' pool and network.
func (f *fixture) libvirtProvider(d *libvirtd.Daemon) *banlieuev1.Provider {
	f.t.Helper()
	return f.provider(builder.Provider(f.ns, "kvm", libvirt.ProviderClass,
		builder.WithConnection(banlieuev1.Connection{Endpoint: d.QEMUURI()}),
		builder.WithTestClasses(libvirt.TargetPool, lvPool, libvirt.TargetNetwork, lvNetwork, lvNetwork),
		builder.WithParameters(map[string]string{libvirt.ParamPool: lvPool, libvirt.ParamDomainType: "qemu"}),
	), nil)
}

// domains lists the names of the daemon's domains.
func domains(g Gomega, d *libvirtd.Daemon) []string {
	l, err := d.Connect("qemu:///system")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Disconnect() }()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(doms))
	for _, dom := range doms {
		names = append(names, dom.Name)
	}
	return names
}

// volumes lists the volumes of the daemon's pool.
func volumes(g Gomega, d *libvirtd.Daemon) []string {
	l, err := d.Connect("qemu:///system")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Disconnect() }()
	pool, err := l.StoragePoolLookupByName(lvPool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.StoragePoolRefresh(pool, 0)).To(Succeed())
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(vols))
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names
}

func TestAVirtualMachineLivesItsWholeLifeOnLibvirt(t *testing.T) {
	f := newFixture(t)
	d := startLibvirtd(t)
	f.startProvider(libvirtConfig())
	p := f.libvirtProvider(d)
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)

	f.create(builder.UserDataSecret(f.ns, "cloud-init", map[string][]byte{"user-data": []byte("#cloud-config\n")}))
	img := f.image("jammy", builder.BackingFile(libvirt.ProviderClass, lvPool+"/"+lvImage))
	vm := f.vm("web-1", f.class("small"), img, func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}}
	})
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	}, 90*time.Second)
	uid := f.machineUIDOf("LibvirtMachine", vm.Name)
	f.g.Expect(vm.Status.ProviderID).To(HaveSuffix("/" + uid))
	f.g.Expect(domains(f.g, d)).To(ConsistOf(f.ns + ".web-1"))
	f.g.Expect(volumes(f.g, d)).To(ContainElements(uid+"-root.qcow2", uid+"-data.qcow2", uid+"-cidata.iso"))

	// Power off and on.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff)) }, 60*time.Second)
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn)) }, 60*time.Second)

	// Deleting the VM leaves no domain and none of its volumes; the image stays.
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), vm)) }).WithTimeout(60 * time.Second).Should(BeTrue())
	f.g.Expect(domains(f.g, d)).To(BeEmpty())
	f.g.Expect(volumes(f.g, d)).To(ConsistOf(lvImage))
}

func TestALibvirtdThatGoesAwayIsReportedAndRecovers(t *testing.T) {
	f := newFixture(t)
	d := startLibvirtd(t)
	f.startProvider(libvirtConfig())
	p := f.libvirtProvider(d)
	img := f.image("jammy", builder.BackingFile(libvirt.ProviderClass, lvPool+"/"+lvImage))
	vm := f.vm("web-1", f.class("small"), img)
	f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 90*time.Second)

	d.Kill()
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "BackendReachable")).To(HavePrefix("False/Unreachable: "))
	}, 30*time.Second)
	f.g.Expect(d.Restart()).To(Succeed())
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
	// The domain survived the daemon's restart and is still the VM's: one, running.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff)) }, 60*time.Second)
	f.g.Expect(domains(f.g, d)).To(HaveLen(1))
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() []string { return domains(f.g, d) }).WithTimeout(60 * time.Second).Should(BeEmpty())
}
