package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

var seq atomic.Int64

// fixture is one test's namespace, and the cluster-scoped objects it names after it.
type fixture struct {
	t   testing.TB
	g   *WithT
	ctx context.Context
	ns  string
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	if k8s == nil {
		tb.Skip("KUBEBUILDER_ASSETS is not set")
	}
	f := &fixture{t: tb, g: NewWithT(tb), ctx: context.Background(), ns: fmt.Sprintf("e2e-%d", seq.Add(1))}
	f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})
	return f
}

func (f *fixture) create(o client.Object) {
	f.t.Helper()
	f.g.Expect(k8s.Create(f.ctx, o)).To(Succeed())
}

// name makes a cluster-scoped name unique to the test.
func (f *fixture) name(n string) string { return f.ns + "-" + n }

// startProvider runs a provider controller in a manager of its own until the test ends
// or the returned function stops it, as a provider process would run.
func (f *fixture) startProvider(c providersdk.Config) (stop func()) {
	f.t.Helper()
	return testenv.StartProvider(f.t, cfg, c)
}

// vsphereConfig is the vSphere provider with intervals short enough for tests.
func vsphereConfig(driver providersdk.Driver) providersdk.Config {
	c := vsphere.Config(vsphere.WithShutdownTimeout(2 * time.Second))
	if driver != nil {
		c.Driver = driver
	}
	c.InventoryInterval = 2 * time.Second
	c.ImageResync = 2 * time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	return c
}

// labels are the labels of the test's Providers, which its VMs select.
func (f *fixture) labels() map[string]string { return map[string]string{"test": f.ns} }

// vm creates a VirtualMachine placed by the test's label on its Providers.
func (f *fixture) vm(name string, class *banlieuev1.VMClass, img *banlieuev1.VMImage, mods ...func(*banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := builder.VirtualMachine(f.ns, name, class.Name, img.Name, append([]func(*banlieuev1.VirtualMachine){builder.WithProviderSelector(f.labels())}, mods...)...)
	f.create(vm)
	return vm
}

// provider creates p, labelled for this test, and its credentials Secret (none when
// secret is nil), changed by mods first.
func (f *fixture) provider(p *banlieuev1.Provider, secret *corev1.Secret, mods ...func(*banlieuev1.Provider, *corev1.Secret)) *banlieuev1.Provider {
	f.t.Helper()
	p.Labels = f.labels()
	for _, m := range mods {
		m(p, secret)
	}
	if secret != nil {
		f.create(secret)
	}
	f.create(p)
	return p
}

// vsphereProvider creates a Provider for the simulator vs with its credentials Secret,
// and the storage and network classes the test classes use.
func (f *fixture) vsphereProvider(vs *vspheretest.Simulator, mods ...func(*banlieuev1.Provider, *corev1.Secret)) *banlieuev1.Provider {
	f.t.Helper()
	secret := vs.CredentialsSecret(f.ns, "vcenter")
	return f.provider(builder.Provider(f.ns, "vcenter", vsphere.ProviderClass,
		builder.WithConnection(vs.Connection(secret.Name)),
		builder.WithTestClasses("datastore", vspheretest.Datastore, "network", vspheretest.Network, vspheretest.PortGroup),
		builder.WithParameters(map[string]string{"datacenter": vspheretest.Datacenter}),
	), secret, mods...)
}

// class creates a VMClass: 2 CPUs, 2 GiB, a 20 GiB root disk and a 5 GiB data disk on
// "fast", interfaces on "prod" and "backend".
func (f *fixture) class(name string, mods ...func(*banlieuev1.VMClass)) *banlieuev1.VMClass {
	f.t.Helper()
	c := builder.VMClass(f.name(name), append([]func(*banlieuev1.VMClass){
		builder.WithDisks(
			banlieuev1.Disk{Name: "root", SizeGiB: 20, StorageClass: "fast"},
			banlieuev1.Disk{Name: "data", SizeGiB: 5, StorageClass: "fast", Provisioning: banlieuev1.DiskProvisioningThick},
		),
		builder.WithInterfaces(banlieuev1.Interface{Name: "eth0", NetworkClass: "prod"}, banlieuev1.Interface{Name: "eth1", NetworkClass: "backend"}),
	}, mods...)...)
	f.create(c)
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), c) })
	return c
}

// image creates a VMImage with sources.
func (f *fixture) image(name string, sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	f.t.Helper()
	img := builder.VMImage(f.name(name), sources...)
	f.create(img)
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), img) })
	return img
}

// eventually re-reads o until check passes.
func (f *fixture) eventually(o client.Object, check func(g Gomega), timeout time.Duration) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		check(g)
	}).WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// update re-reads o, mutates it and writes it back, retrying on conflicts.
func (f *fixture) update(o client.Object, mutate func()) {
	f.t.Helper()
	f.g.Eventually(func() error {
		if err := k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		mutate()
		return k8s.Update(f.ctx, o)
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// machine reads the VM's VSphereMachine.
func (f *fixture) machine(name string) *infrav1.VSphereMachine {
	f.t.Helper()
	m := &infrav1.VSphereMachine{}
	f.g.Expect(k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m)).To(Succeed())
	return m
}

// conditionOf returns "Status/Reason: Message" of the condition t, or "".
func conditionOf(conditions []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conditions, t)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}
