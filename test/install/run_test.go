package install

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

const (
	// coreServiceAccount and vsphereServiceAccount are the ServiceAccounts the manifests
	// give the core controller and the vSphere provider.
	coreServiceAccount    = "banlieue-controller"
	vsphereServiceAccount = "banlieue-provider-vsphere"
	// coreLease is the core controller's leader-election Lease, as 'banlieue controller'
	// names it.
	coreLease = "banlieue-controller.banlieue.io"
)

// managerOptions are a manager's options as 'banlieue controller' and 'banlieue provider'
// set them, with leader election in the system namespace on the Lease id and timings
// short enough for tests.
func managerOptions(id string) ctrl.Options {
	return ctrl.Options{
		Scheme:                        env.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       systemNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(4 * time.Second),
		RenewDeadline:                 ptr.To(3 * time.Second),
		RetryPeriod:                   ptr.To(500 * time.Millisecond),
		// The suite runs the same controllers in several managers of one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// started runs mgr until the test ends or the returned function stops it.
func started(t *testing.T, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// coreManager is a core controller impersonating its ServiceAccount, as
// 'banlieue controller' sets it up.
func coreManager(t *testing.T) ctrl.Manager {
	t.Helper()
	g := NewWithT(t)
	mgr, err := ctrl.NewManager(serviceAccountConfig(coreServiceAccount), managerOptions(coreLease))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&virtualmachine.Reconciler{Client: mgr.GetClient()}).SetupWithManager(context.Background(), mgr, controller.Options{MaxConcurrentReconciles: 2})).To(Succeed())
	return mgr
}

// testVSphereConfig is the vSphere provider with intervals short enough for tests.
func testVSphereConfig() providersdk.Config {
	c := vsphere.Config(vsphere.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval = 2 * time.Second
	c.ImageResync = 2 * time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	return c
}

// ready returns "Status/Reason" of the Ready condition, or "".
func ready(conditions []metav1.Condition) string {
	c := meta.FindStatusCondition(conditions, banlieuev1.ReadyCondition)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

func TestAVMReachesReadyWithTheInstalledRBACOnly(t *testing.T) {
	installed(t)
	g := NewWithT(t)
	ctx := context.Background()

	// The core controller and the vSphere provider run as their ServiceAccounts, with
	// nothing but the RBAC the manifests bind to them.
	started(t, coreManager(t))
	vs := vspheretest.Start(t)
	provider, err := ctrl.NewManager(serviceAccountConfig(vsphereServiceAccount), managerOptions("banlieue-provider-vsphere.banlieue.io"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(providersdk.Setup(provider, testVSphereConfig())).To(Succeed())
	started(t, provider)

	// An administrator's objects: a Provider with its credentials in the Providers'
	// namespace, a class and an image; a user's VM in a namespace of its own.
	secret := vs.CredentialsSecret(providersNamespace, "vcenter")
	g.Expect(k8s.Create(ctx, secret)).To(Succeed())
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: providersNamespace, Name: "vcenter", Labels: map[string]string{"site": "install-test"}},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: vsphere.ProviderClass},
			Connection:       vs.Connection(secret.Name),
			Capabilities: banlieuev1.Capabilities{
				StorageClasses: []banlieuev1.ClassMapping{{Name: "fast", Target: map[string]string{"datastore": vspheretest.Datastore}}},
				NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod", Target: map[string]string{"network": vspheretest.Network}}},
			},
			Parameters: map[string]string{"datacenter": vspheretest.Datacenter},
		},
	}
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	class := &banlieuev1.VMClass{
		ObjectMeta: metav1.ObjectMeta{Name: "install-small"},
		Spec: banlieuev1.VMClassSpec{
			Hardware: banlieuev1.Hardware{CPUs: 1, MemoryMiB: 1024, Disks: []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}},
			Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
		},
	}
	g.Expect(k8s.Create(ctx, class)).To(Succeed())
	img := &banlieuev1.VMImage{
		ObjectMeta: metav1.ObjectMeta{Name: "install-ubuntu"},
		Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
			{ProviderClass: vsphere.ProviderClass, Kind: banlieuev1.ImageSourceTemplate, Ref: vspheretest.TemplateName},
		}},
	}
	g.Expect(k8s.Create(ctx, img)).To(Succeed())
	// The user's namespace, where config/providers/user-data lets the providers read
	// Secrets, holds the VM's user-data.
	userData := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: "web-1-user-data"},
		Type:       banlieuev1.UserDataSecretType,
		Data:       map[string][]byte{"user-data": []byte("#cloud-config\nhostname: web-1\n")},
	}
	g.Expect(k8s.Create(ctx, userData)).To(Succeed())
	vm := &banlieuev1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: "web-1"},
		Spec: banlieuev1.VirtualMachineSpec{
			ClassRef:  banlieuev1.LocalObjectReference{Name: class.Name},
			ImageRef:  banlieuev1.LocalObjectReference{Name: img.Name},
			Placement: banlieuev1.Placement{ProviderSelector: &banlieuev1.LabelSelector{MatchLabels: map[string]string{"site": "install-test"}}},
			UserData:  banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: userData.Name}},
		},
	}
	g.Expect(k8s.Create(ctx, vm)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(ready(p.Status.Conditions)).To(Equal("True/Ready"))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
		g.Expect(ready(vm.Status.Conditions)).To(HavePrefix("True/"))
		g.Expect(vm.Status.ProviderID).To(HavePrefix("vsphere://"))
	}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	// Both processes held their Leases, in the system namespace, and recorded the
	// core/v1 Event leader election sends there: their RBAC allows both.
	for _, id := range []string{coreLease, "banlieue-provider-vsphere.banlieue.io"} {
		lease := &coordinationv1.Lease{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: id}, lease)).To(Succeed())
		g.Eventually(leaderElectionEvents).WithArguments(id).WithTimeout(10 * time.Second).
			Should(ContainElement(ContainSubstring(ptr.Deref(lease.Spec.HolderIdentity, "") + " became leader")))
	}
}

// leaderElectionEvents returns the messages of the core/v1 Events leader election
// recorded on the Lease id in the system namespace.
func leaderElectionEvents(id string) ([]string, error) {
	events := &corev1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(systemNamespace)); err != nil {
		return nil, err
	}
	var messages []string
	for _, e := range events.Items {
		if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == id {
			messages = append(messages, e.Message)
		}
	}
	return messages, nil
}

func TestServiceAccountsReadNoSecretOutsideTheirGrant(t *testing.T) {
	installed(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, serviceAccount, namespace string
		allowed                         bool
	}{
		{name: "vSphere provider, Secret in the Providers' namespace", serviceAccount: vsphereServiceAccount, namespace: providersNamespace, allowed: true},
		{name: "vSphere provider, Secret in the system namespace", serviceAccount: vsphereServiceAccount, namespace: systemNamespace},
		{name: "vSphere provider, Secret in a user's namespace", serviceAccount: vsphereServiceAccount, namespace: "default"},
		{name: "vSphere provider, Secret in a user's namespace granted by user-data", serviceAccount: vsphereServiceAccount, namespace: userNamespace, allowed: true},
		{name: "libvirt provider, Secret in the Providers' namespace", serviceAccount: "banlieue-provider-libvirt", namespace: providersNamespace, allowed: true},
		{name: "Proxmox provider, Secret in a user's namespace granted by user-data", serviceAccount: "banlieue-provider-proxmox", namespace: userNamespace, allowed: true},
		{name: "core controller, Secret in the Providers' namespace", serviceAccount: coreServiceAccount, namespace: providersNamespace},
		{name: "core controller, Secret in a user's namespace", serviceAccount: coreServiceAccount, namespace: "default"},
		{name: "core controller, Secret in a user's namespace granted by user-data", serviceAccount: coreServiceAccount, namespace: userNamespace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := impersonatingClient(g, serviceAccountConfig(tc.serviceAccount))
			err := c.Get(ctx, client.ObjectKey{Namespace: tc.namespace, Name: "absent"}, &corev1.Secret{})
			if tc.allowed {
				g.Expect(client.IgnoreNotFound(err)).To(Succeed(), "a get that RBAC allows finds no such Secret")
			} else {
				g.Expect(forbidden(err)).To(BeTrue(), "got %v", err)
			}
			// Nobody lists Secrets, anywhere.
			g.Expect(forbidden(c.List(ctx, &corev1.SecretList{}, client.InNamespace(tc.namespace)))).To(BeTrue())
		})
	}
}

func TestEachBinaryHoldsLeasesAndRecordsCoreEventsInTheSystemNamespaceOnly(t *testing.T) {
	installed(t)
	ctx := context.Background()
	for _, serviceAccount := range []string{coreServiceAccount, vsphereServiceAccount} {
		for _, tc := range []struct {
			name, namespace string
			allowed         bool
		}{
			{name: "in the system namespace", namespace: systemNamespace, allowed: true},
			{name: "in the Providers' namespace", namespace: providersNamespace},
			{name: "in a user's namespace", namespace: userNamespace},
		} {
			t.Run(serviceAccount+" "+tc.name, func(t *testing.T) {
				g := NewWithT(t)
				c := impersonatingClient(g, serviceAccountConfig(serviceAccount))
				lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "rbac-probe"}}
				// The core/v1 Event leader election records on its Lease.
				event := &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Namespace: tc.namespace, Name: "rbac-probe"},
					InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: tc.namespace, Name: "rbac-probe"},
					Reason:         "LeaderElection", Message: "rbac-probe became leader", Type: corev1.EventTypeNormal,
				}
				for _, err := range []error{
					c.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}),
					c.Create(ctx, lease, client.DryRunAll),
					c.Create(ctx, event, client.DryRunAll),
				} {
					if tc.allowed {
						g.Expect(client.IgnoreNotFound(err)).To(Succeed())
					} else {
						g.Expect(forbidden(err)).To(BeTrue(), "got %v", err)
					}
				}
			})
		}
	}
}

// impersonatingClient is a direct client with cfg.
func impersonatingClient(g *WithT, cfg *rest.Config) client.Client {
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

func TestAStandbyCoreControllerTakesOverTheLease(t *testing.T) {
	installed(t)
	g := NewWithT(t)
	ctx := context.Background()
	holder := func() string {
		lease := &coordinationv1.Lease{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: coreLease}, lease); err != nil {
			return ""
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "")
	}

	first := coreManager(t)
	stopFirst := started(t, first)
	g.Eventually(first.Elected()).WithTimeout(30 * time.Second).Should(BeClosed())
	firstHolder := holder()
	g.Expect(firstHolder).NotTo(BeEmpty())

	// The second replica waits while the first holds the Lease.
	second := coreManager(t)
	started(t, second)
	g.Consistently(second.Elected()).WithTimeout(2 * time.Second).ShouldNot(BeClosed())
	g.Expect(holder()).To(Equal(firstHolder))

	// The leader stops (its pod is deleted); the standby takes over.
	stopFirst()
	g.Eventually(second.Elected()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Eventually(holder).WithTimeout(10 * time.Second).Should(And(Not(BeEmpty()), Not(Equal(firstHolder))))

	// Each leader recorded its election as a core/v1 Event on the Lease.
	g.Eventually(leaderElectionEvents).WithArguments(coreLease).WithTimeout(10 * time.Second).Should(ContainElements(
		ContainSubstring(firstHolder+" became leader"), ContainSubstring(holder()+" became leader")))
}
