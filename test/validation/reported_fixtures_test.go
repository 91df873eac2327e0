package validation

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	"github.com/banlieue/banlieue/test/testenv"
)

// manager is a controller manager started by a test, as a process would run it.
type manager struct {
	name   string
	cancel context.CancelFunc
	done   chan error
}

// running reports an error when the manager has stopped on its own.
func (m *manager) running() error {
	select {
	case err := <-m.done:
		m.done <- err
		if err == nil {
			return fmt.Errorf("the %s manager stopped without an error", m.name)
		}
		return fmt.Errorf("the %s manager stopped: %w", m.name, err)
	default:
		return nil
	}
}

// controllers are the core controller and the vSphere and Proxmox providers, each in a
// manager of its own, against one vcsim and one simulated PVE cluster.
type controllers struct {
	managers []*manager
	vs       *vspheretest.Simulator
	pve      *proxmoxtest.Simulator
}

// startControllers starts the simulators and the managers; they stop when the test ends.
func startControllers(t *testing.T) *controllers {
	t.Helper()
	c := &controllers{
		vs: vspheretest.Start(t),
		pve: proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.Bridges = []string{proxmoxtest.Bridge, "vmbr1"}
			o.GuestAgentDelay = 200 * time.Millisecond
		}),
	}
	vsCfg := vsphere.Config(vsphere.WithShutdownTimeout(2 * time.Second))
	pveCfg := proxmox.Config(proxmox.WithSnippetWriter(c.pve), proxmox.WithShutdownTimeout(2*time.Second))
	for _, p := range []*providersdk.Config{&vsCfg, &pveCfg} {
		p.InventoryInterval, p.ImageResync, p.MachineOptions = 2*time.Second, 2*time.Second, append(p.MachineOptions, testenv.FastMachineOptions()...)
	}

	c.start(t, "core", func(ctx context.Context, mgr ctrl.Manager) error {
		return (&virtualmachine.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 4})
	})
	c.start(t, "vsphere", func(_ context.Context, mgr ctrl.Manager) error { return providersdk.Setup(mgr, vsCfg) })
	c.start(t, "proxmox", func(_ context.Context, mgr ctrl.Manager) error { return providersdk.Setup(mgr, pveCfg) })
	return c
}

// start runs one manager set up by setup until the test ends.
func (c *controllers) start(t *testing.T, name string, setup func(context.Context, ctrl.Manager) error) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The suite may run more than once in a process (go test -count).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("failed to create the %s manager: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		t.Fatalf("failed to set up the %s controllers: %v", name, err)
	}
	m := &manager{name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	c.managers = append(c.managers, m)
	t.Cleanup(func() {
		cancel()
		if err := <-m.done; err != nil {
			t.Errorf("the %s manager: %v", name, err)
		}
	})
}

// healthy fails the test when a manager stopped or a reconciler panicked.
func (c *controllers) healthy(t *testing.T) {
	t.Helper()
	for _, m := range c.managers {
		if err := m.running(); err != nil {
			t.Error(err)
		}
	}
	panics, controllers := reconcilePanics(t)
	if controllers < 7 {
		t.Errorf("controller-runtime counts the panics of %d controllers; want the core's and the two providers' 3 each", controllers)
	}
	if panics != 0 {
		t.Errorf("reconcilers panicked %v times (controller_runtime_reconcile_panics_total); the log has the stacks", panics)
	}
}

// reconcilePanics sums controller-runtime's count of reconciles that panicked (and were
// recovered) across the process's controllers, and says how many controllers it counts.
func reconcilePanics(t *testing.T) (panics float64, controllers int) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("failed to gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_panics_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			panics += m.GetCounter().GetValue()
			controllers++
		}
	}
	return panics, controllers
}

var worldSeq atomic.Int64

// world is one row's namespace and the cluster-scoped objects it names after it; its
// Providers carry the label test=<namespace>, which its VMs select.
type world struct {
	t   *testing.T
	g   *WithT
	ctx context.Context
	ns  string
	*controllers

	// secrets are the values of the credentials the row wrote, which no condition may show.
	secrets []string
}

func newWorld(t *testing.T, c *controllers) *world {
	t.Helper()
	w := &world{t: t, g: NewWithT(t), ctx: context.Background(), ns: fmt.Sprintf("hostile-%d", worldSeq.Add(1)), controllers: c}
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}})
	t.Cleanup(w.cleanUp)
	return w
}

func (w *world) create(o client.Object) {
	w.t.Helper()
	w.g.Expect(k8sClient.Create(w.ctx, o)).To(Succeed(), "creating %T %s", o, o.GetName())
}

// name makes a cluster-scoped name unique to the row.
func (w *world) name(n string) string { return w.ns + "-" + n }

// labels are the labels of the row's Providers, which its VMs select.
func (w *world) labels() map[string]string { return map[string]string{"test": w.ns} }

// secret creates a Secret in the row's namespace.
func (w *world) secret(name string, data map[string][]byte) {
	w.t.Helper()
	w.create(builder.Secret(w.ns, name, data))
}

// userDataSecret creates a Secret of the user-data type in the row's namespace.
func (w *world) userDataSecret(name string, data map[string][]byte) {
	w.t.Helper()
	w.create(builder.UserDataSecret(w.ns, name, data))
}

// providerMod changes a Provider and its credentials Secret before they are created; a
// mod that sets the Secret's name to "" keeps it from being created.
type providerMod func(*banlieuev1.Provider, *corev1.Secret)

// provider creates p, labelled for the row, and its credentials Secret s, changed by
// mods.
func (w *world) provider(p *banlieuev1.Provider, s *corev1.Secret, mods ...providerMod) *banlieuev1.Provider {
	w.t.Helper()
	p.Labels = w.labels()
	for _, m := range mods {
		m(p, s)
	}
	if s.Name != "" {
		for _, v := range s.Data {
			if len(v) >= 6 {
				w.secrets = append(w.secrets, strings.TrimSpace(string(v)))
			}
		}
		w.create(s)
	}
	w.create(p)
	return p
}

// vsphereProvider is a Provider for the row's vcsim, with storage class fast and
// network classes prod and backend.
func (w *world) vsphereProvider(mods ...providerMod) *banlieuev1.Provider {
	w.t.Helper()
	s := w.vs.CredentialsSecret(w.ns, "vcenter")
	p := builder.Provider(w.ns, "vcenter", vsphere.ProviderClass, builder.WithConnection(w.vs.Connection(s.Name)),
		builder.WithTestClasses("datastore", vspheretest.Datastore, "network", vspheretest.Network, vspheretest.PortGroup),
		builder.WithParameters(map[string]string{"datacenter": vspheretest.Datacenter}))
	return w.provider(p, s, mods...)
}

// proxmoxProvider is a Provider for the row's PVE cluster on node pve1, with the same
// classes as vsphereProvider.
func (w *world) proxmoxProvider(mods ...providerMod) *banlieuev1.Provider {
	w.t.Helper()
	s := w.pve.TokenCredentialsSecret(w.ns, "pve")
	p := builder.Provider(w.ns, "pve", proxmox.ProviderClass, builder.WithConnection(w.pve.Connection(s.Name)),
		builder.WithTestClasses("storage", proxmoxtest.Storage, "bridge", proxmoxtest.Bridge, "vmbr1"),
		builder.WithParameters(map[string]string{"node": proxmoxtest.Node1}))
	return w.provider(p, s, mods...)
}

// class creates the row's VMClass: the builder's 2 CPUs, 2 GiB, 20 GiB root disk on fast
// and interface on prod, changed by mods.
func (w *world) class(mods ...func(*banlieuev1.VMClass)) *banlieuev1.VMClass {
	w.t.Helper()
	c := builder.VMClass(w.name("small"), mods...)
	w.create(c)
	return c
}

// image creates a VMImage named after the row with sources; the default is a template
// source for both simulators.
func (w *world) image(sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	w.t.Helper()
	return w.imageNamed(w.name("ubuntu"), sources...)
}

func (w *world) imageNamed(name string, sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	w.t.Helper()
	if len(sources) == 0 {
		sources = []banlieuev1.ImageSource{
			builder.Template(vsphere.ProviderClass, vspheretest.TemplateName),
			builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName),
		}
	}
	img := builder.VMImage(name, sources...)
	w.create(img)
	return img
}

// vm creates a VirtualMachine of class and image that selects the row's Providers.
func (w *world) vm(name string, class *banlieuev1.VMClass, img *banlieuev1.VMImage, mods ...func(*banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
	w.t.Helper()
	vm := builder.VirtualMachine(w.ns, name, class.Name, img.Name, append([]func(*banlieuev1.VirtualMachine){builder.WithProviderSelector(w.labels())}, mods...)...)
	w.create(vm)
	return vm
}

// ready waits until the Provider p is Ready, so that a row's VM is placed on it rather
// than rejected while the Provider is still being checked.
func (w *world) ready(p *banlieuev1.Provider) {
	w.t.Helper()
	w.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, banlieuev1.ReadyCondition)).To(BeTrue(), "Provider %s conditions %+v", p.Name, p.Status.Conditions)
		g.Expect(p.Status.FailureDomains).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// resolved waits until the Provider p has written its row of img's status, so that a
// row's VM is placed knowing whether the image can be used there: a template image
// with no row yet is a candidate, as its row may only be late.
func (w *world) resolved(img *banlieuev1.VMImage, p *banlieuev1.Provider) {
	w.t.Helper()
	w.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(w.ctx, client.ObjectKeyFromObject(img), img)).To(Succeed())
		g.Expect(img.Status.PerProvider).To(ContainElement(HaveField("ProviderName", p.Name)), "image %s rows %+v", img.Name, img.Status.PerProvider)
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// conditions returns the conditions of a VirtualMachine, a Provider or an
// infrastructure machine.
func conditions(o client.Object) []metav1.Condition {
	switch o := o.(type) {
	case *banlieuev1.VirtualMachine:
		return o.Status.Conditions
	case *banlieuev1.Provider:
		return o.Status.Conditions
	case *infrav1.VSphereMachine:
		return o.Status.Conditions
	case *infrav1.ProxmoxMachine:
		return o.Status.Conditions
	}
	panic(fmt.Sprintf("no conditions on %T", o))
}

// cleanUp deletes the row's VMs and waits until they are gone, which takes their
// machines and backend VMs with them, then does the same for its Providers, then
// deletes its classes and images. A hostile row must not leave anything stuck.
func (w *world) cleanUp() {
	w.t.Helper()
	ctx := context.Background()
	g := NewWithT(w.t)
	gone := func(list client.ObjectList, opts ...client.ListOption) func(Gomega) {
		return func(g Gomega) {
			g.Expect(k8sClient.List(ctx, list, opts...)).To(Succeed())
			g.Expect(meta.LenList(list)).To(BeZero(), "objects left in %s", w.ns)
		}
	}
	for _, step := range []struct {
		obj  client.Object
		list client.ObjectList
	}{
		{&banlieuev1.VirtualMachine{}, &banlieuev1.VirtualMachineList{}},
		{&banlieuev1.Provider{}, &banlieuev1.ProviderList{}},
	} {
		g.Expect(k8sClient.DeleteAllOf(ctx, step.obj, client.InNamespace(w.ns))).To(Succeed())
		g.Eventually(gone(step.list, client.InNamespace(w.ns))).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(),
			"a %T of row %q is stuck being deleted", step.obj, w.t.Name())
	}
	for _, list := range []client.ObjectList{&banlieuev1.VMClassList{}, &banlieuev1.VMImageList{}} {
		g.Expect(k8sClient.List(ctx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			o := item.(client.Object)
			if strings.HasPrefix(o.GetName(), w.ns+"-") {
				if err := k8sClient.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
					w.t.Errorf("deleting %s: %v", o.GetName(), err)
				}
			}
		}
	}
}

// longName returns a DNS subdomain of the longest length, 253 characters, that starts
// with prefix.
func longName(prefix string) string {
	const n = 253
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		b.WriteString("-abcdefghij")
	}
	s := b.String()[:n]
	return strings.TrimRight(s, "-") + strings.Repeat("z", n-len(strings.TrimRight(s, "-")))
}
