package validation

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

// tenancy is one row's tenants: tenant A, who attacks, and tenant B, whose objects it
// is after, each a namespace with a user of its own who holds only the roles of
// config/rbac/tenant there. The row's world namespace plays the administrators'
// namespace: its Providers admit tenant B only, or both tenants when a row says so.
type tenancy struct {
	*world
	a, b               string
	asA                client.Client
	vsphereP, proxmoxP *banlieuev1.Provider
	// password is a value the row puts in an Opaque Secret of tenant A's namespace,
	// which nothing may ever show.
	password string
}

// tenantRoles installs the ClusterRoles of config/rbac/tenant, once per suite.
var tenantRoles sync.Once

func newTenancy(t *testing.T, c *controllers, admitBoth bool) *tenancy {
	t.Helper()
	w := newWorld(t, c)
	tn := &tenancy{world: w, a: w.ns + "-a", b: w.ns + "-b", password: "pw-" + w.ns + "-s3cr3t"}
	testenv.ForbidInLogs(tn.password)
	tenantRoles.Do(func() { installTenantRoles(t) })
	for _, ns := range []string{tn.a, tn.b} {
		w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tenant": ns}}})
		w.create(&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "user-of-" + ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "banlieue-tenant-test"},
		})
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "user-of-" + tn.a, Groups: []string{"system:authenticated"}}
	var err error
	tn.asA, err = client.New(cfg, client.Options{Scheme: env.Scheme})
	w.g.Expect(err).NotTo(HaveOccurred())

	admitted := []string{tn.b}
	if admitBoth {
		admitted = append(admitted, tn.a)
	}
	onlyTenants := func(p *banlieuev1.Provider, _ *corev1.Secret) {
		p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchExpressions: []banlieuev1.LabelSelectorRequirement{
			{Key: "tenant", Operator: metav1.LabelSelectorOpIn, Values: admitted},
		}}
	}
	tn.vsphereP = w.vsphereProvider(onlyTenants)
	tn.proxmoxP = w.proxmoxProvider(onlyTenants)
	w.ready(tn.vsphereP)
	w.ready(tn.proxmoxP)
	// Tenant A's VMs and machines go before the world's Providers do.
	t.Cleanup(func() { tn.cleanUpTenants() })
	return tn
}

// installTenantRoles creates the shipped ClusterRoles and a test one that combines them
// with what a tenant has on Secrets in its namespace (as edit grants).
func installTenantRoles(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath("config/rbac/tenant/roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	combined := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "banlieue-tenant-test"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	for {
		role := &rbacv1.ClusterRole{}
		if err := dec.Decode(role); err != nil {
			break
		}
		if role.Name == "" {
			continue
		}
		if err := k8sClient.Create(context.Background(), role); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if role.Name != "banlieue-vm-viewer" {
			combined.Rules = append(combined.Rules, role.Rules...)
		}
	}
	if err := k8sClient.Create(context.Background(), combined); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// cleanUpTenants deletes the tenants' VMs and machines and waits until they are gone.
func (tn *tenancy) cleanUpTenants() {
	ctx := context.Background()
	g := NewWithT(tn.t)
	for _, ns := range []string{tn.a, tn.b} {
		for _, o := range []client.Object{&banlieuev1.VirtualMachine{}, &infrav1.VSphereMachine{}, &infrav1.ProxmoxMachine{}} {
			g.Expect(k8sClient.DeleteAllOf(ctx, o, client.InNamespace(ns))).To(Succeed())
		}
		g.Eventually(func(g Gomega) {
			for _, list := range []client.ObjectList{&banlieuev1.VirtualMachineList{}, &infrav1.VSphereMachineList{}, &infrav1.ProxmoxMachineList{}} {
				g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
				g.Expect(meta.LenList(list)).To(BeZero(), "objects left in %s", ns)
			}
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
}

// machineSpec is a machine as core would write it for tenant A on p, with the row's
// image: what an attack then changes.
func (tn *tenancy) machineSpec(p *banlieuev1.Provider, img *banlieuev1.VMImage) infrav1.MachineSpec {
	src := img.SourceFor(p.Spec.ProviderClassRef.Name)
	spec := infrav1.MachineSpec{
		ProviderRef: infrav1.ProviderRef{Namespace: p.Namespace, Name: p.Name},
		Image:       infrav1.MachineImage{Name: img.Name, Kind: src.Kind, Ref: src.Ref},
		Hardware:    infrav1.MachineHardware{CPUs: 1, MemoryMiB: 512},
		Disks:       []infrav1.MachineDisk{{Name: "root", SizeGiB: 20, StorageClass: "fast", Target: p.StorageClass("fast").Target}},
		Interfaces:  []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: p.NetworkClass("prod").Target}},
		PowerState:  banlieuev1.PowerStatePoweredOn,
	}
	return spec
}

// vsphereMachine and proxmoxMachine are tenant A's machines named web on the row's
// Providers, as spec says.
func (tn *tenancy) vsphereMachine(spec infrav1.MachineSpec) client.Object {
	return &infrav1.VSphereMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.a, Name: "web"}, Spec: infrav1.VSphereMachineSpec{MachineSpec: spec}}
}

func (tn *tenancy) proxmoxMachine(spec infrav1.MachineSpec) client.Object {
	return &infrav1.ProxmoxMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.a, Name: "web"}, Spec: infrav1.ProxmoxMachineSpec{MachineSpec: spec}}
}

// tenancyCase is one attack by tenant A: what it does, and how it must fail.
type tenancyCase struct {
	name string
	// admitBoth makes the row's Providers admit tenant A too.
	admitBoth bool
	// attack does it as tenant A (or as an administrator misled by one) and returns the
	// object whose condition reports the refusal, or nil when the API refused it; then
	// apiError holds parts of the API's error.
	attack   func(tn *tenancy) (client.Object, error)
	apiError []string
	// condition, reason and message are what the object must come to say.
	condition, reason string
	message           []string
	// then checks more once the condition says it.
	then func(g Gomega, tn *tenancy, obj client.Object)
}

// noVSphereVMFor checks that vCenter has no VM of the tenant's machine.
func noVSphereVMFor(g Gomega, tn *tenancy, obj client.Object) {
	vms, err := tn.vs.VMsWithUID(context.Background(), string(obj.GetUID()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vms).To(BeEmpty(), "vCenter made a VM for a refused machine")
}

var tenancyCases = []tenancyCase{
	{
		name: "A machine created directly on a Provider that does not admit the tenant's namespace is NotPermitted, and no VM is made.",
		attack: func(tn *tenancy) (client.Object, error) {
			m := tn.vsphereMachine(tn.machineSpec(tn.vsphereP, tn.image()))
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{"does not admit namespace"},
		then:    noVSphereVMFor,
	},
	{
		name:      "A machine that clones another VM by its managed object ID instead of its VMImage's template is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.vsphereP, tn.image())
			spec.Image.ResolvedRef = tn.vs.TemplateRef + "0"
			m := tn.vsphereMachine(spec)
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{"spec.image.resolvedRef"},
		then:    noVSphereVMFor,
	},
	{
		name:      "A machine whose image ref names another backend object than its VMImage's source is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.vsphereP, tn.image())
			spec.Image.Ref = "/" + vspheretest.Datacenter + "/vm/tenant-b-db"
			m := tn.vsphereMachine(spec)
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{"spec.image is not VMImage"},
		then:    noVSphereVMFor,
	},
	{
		name:      "A machine whose disk sits on a datastore its Provider never offered is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.vsphereP, tn.image())
			spec.Disks[0].Target = map[string]string{"datastore": "tenant-b-ds"}
			m := tn.vsphereMachine(spec)
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{"spec.disks[0].target"},
		then:    noVSphereVMFor,
	},
	{
		name:      "A machine whose interface is on a bridge its Provider never offered for the class is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.proxmoxP, tn.image())
			spec.Interfaces[0].Target = map[string]string{"bridge": "vmbr1"}
			m := tn.proxmoxMachine(spec)
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{"spec.interfaces[0].target"},
		then: func(g Gomega, tn *tenancy, obj client.Object) {
			for _, vm := range tn.pve.VMs() {
				g.Expect(vm.Config["tags"]).NotTo(ContainSubstring(string(obj.GetUID())), "Proxmox VE made a VM for a refused machine")
			}
		},
	},
	{
		name:      "A machine whose spec.vsphere block picks a datastore its Provider never offered is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			m := tn.vsphereMachine(tn.machineSpec(tn.vsphereP, tn.image())).(*infrav1.VSphereMachine)
			m.Spec.VSphere = &infrav1.VSphereOptions{Datastore: "tenant-b-ds"}
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{`spec.vsphere.datastore "tenant-b-ds"`},
		then:    noVSphereVMFor,
	},
	{
		name:      "A machine whose spec.proxmox block picks a node its Provider does not offer is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			m := tn.proxmoxMachine(tn.machineSpec(tn.proxmoxP, tn.image())).(*infrav1.ProxmoxMachine)
			m.Spec.Proxmox = &infrav1.ProxmoxOptions{Node: "tenant-b-node"}
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{`spec.proxmox.node "tenant-b-node"`},
	},
	{
		name:      "A machine in a failure domain its Provider does not publish is NotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.proxmoxP, tn.image())
			spec.FailureDomain = "tenant-b-node"
			m := tn.proxmoxMachine(spec)
			return m, tn.asA.Create(tn.ctx, m)
		},
		condition: banlieuev1.ReadyCondition, reason: infrav1.MachineNotPermittedReason,
		message: []string{`no failure domain "tenant-b-node"`},
	},
	{
		name:      "A VM whose user data is an Opaque Secret (a database password) is not created: UserDataNotPermitted.",
		admitBoth: true,
		attack: func(tn *tenancy) (client.Object, error) {
			if err := tn.asA.Create(tn.ctx, builder.Secret(tn.a, "db", map[string][]byte{"user-data": []byte(tn.password)})); err != nil {
				return nil, err
			}
			vm := builder.VirtualMachine(tn.a, "web", tn.class().Name, tn.image().Name,
				builder.WithProviderSelector(tn.labels()), builder.WithUserData("db", ""))
			return vm, tn.asA.Create(tn.ctx, vm)
		},
		condition: banlieuev1.VirtualMachineInfrastructureReadyCondition, reason: infrav1.MachineUserDataNotPermittedReason,
		message: []string{banlieuev1.UserDataSecretType},
	},
	{
		name: "A VM no admitted Provider can take says so without naming the Providers that do not admit its namespace.",
		attack: func(tn *tenancy) (client.Object, error) {
			vm := builder.VirtualMachine(tn.a, "web", tn.class().Name, tn.image().Name, builder.WithProviderSelector(tn.labels()))
			return vm, tn.asA.Create(tn.ctx, vm)
		},
		condition: banlieuev1.VirtualMachineScheduledCondition, reason: banlieuev1.VirtualMachineNoCandidateReason,
		message: []string{"2 Providers do not admit namespace"},
		then: func(g Gomega, tn *tenancy, obj client.Object) {
			c := meta.FindStatusCondition(obj.(*banlieuev1.VirtualMachine).Status.Conditions, banlieuev1.VirtualMachineScheduledCondition)
			for _, p := range []*banlieuev1.Provider{tn.vsphereP, tn.proxmoxP} {
				g.Expect(c.Message).NotTo(ContainSubstring(p.Name), "the message names a Provider tenant A may not use")
				endpoint, err := url.Parse(p.Spec.Connection.Endpoint)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.Message).NotTo(ContainSubstring(endpoint.Host), "the message shows a Provider's endpoint")
				g.Expect(c.Message).NotTo(ContainSubstring(p.Spec.Connection.CredentialsRef.Name+" "), "the message names a credentials Secret")
			}
		},
	},
	{
		name: "A tenant cannot create a machine in another tenant's namespace.",
		attack: func(tn *tenancy) (client.Object, error) {
			spec := tn.machineSpec(tn.vsphereP, tn.image())
			m := &infrav1.VSphereMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.b, Name: "web"}, Spec: infrav1.VSphereMachineSpec{MachineSpec: spec}}
			return nil, tn.asA.Create(tn.ctx, m)
		},
		apiError: []string{"forbidden", "vspheremachines"},
	},
	{
		name: "A tenant cannot read the Providers, which name endpoints and credential Secrets.",
		attack: func(tn *tenancy) (client.Object, error) {
			return nil, tn.asA.List(tn.ctx, &banlieuev1.ProviderList{}, client.InNamespace(tn.ns))
		},
		apiError: []string{"forbidden", "providers"},
	},
	{
		name: "A tenant cannot read another tenant's Secrets.",
		attack: func(tn *tenancy) (client.Object, error) {
			return nil, tn.asA.Get(tn.ctx, client.ObjectKey{Namespace: tn.b, Name: "anything"}, &corev1.Secret{})
		},
		apiError: []string{"forbidden", "secrets"},
	},
	{
		name: "A tenant cannot write a machine's status, which only its provider writes.",
		attack: func(tn *tenancy) (client.Object, error) {
			m := tn.vsphereMachine(tn.machineSpec(tn.vsphereP, tn.image())).(*infrav1.VSphereMachine)
			if err := tn.asA.Create(tn.ctx, m); err != nil {
				return nil, err
			}
			m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: metav1.Now()}}
			return nil, tn.asA.Status().Update(tn.ctx, m)
		},
		apiError: []string{"forbidden", "vspheremachines/status"},
	},
	{
		name: "A tenant cannot publish a VMImage, which every namespace's VMs may use.",
		attack: func(tn *tenancy) (client.Object, error) {
			return nil, tn.asA.Create(tn.ctx, builder.VMImage(tn.name("evil"), builder.Template("vsphere", "tenant-b-db")))
		},
		apiError: []string{"forbidden", "vmimages"},
	},
	{
		name: "An endpoint written with a password is refused by the API, which says where credentials go.",
		attack: func(tn *tenancy) (client.Object, error) {
			p := builder.Provider(tn.ns, "leaky", "vsphere", builder.WithConnection(banlieuev1.Connection{
				Endpoint: "https://admin:" + tn.password + "@127.0.0.1:1/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: "vcenter"},
			}))
			return nil, k8sClient.Create(tn.ctx, p)
		},
		apiError: []string{"credentialsRef"},
	},
}

func TestTenantsCannotEscapeTheirProvider(t *testing.T) {
	needAPIServer(t)
	c := startControllers(t)
	t.Run("attacks", func(t *testing.T) {
		for _, tc := range tenancyCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, c)
			})
		}
	})
	c.healthy(t)
	if leaked := testenv.LeakedLogLines(); len(leaked) > 0 {
		t.Errorf("a controller logged a credential:\n%s", strings.Join(leaked, "\n"))
	}
}

// run makes the row's attack and waits until it has failed as it must; then no status
// or Event in the tenants' namespaces shows a credential.
func (tc tenancyCase) run(t *testing.T, c *controllers) {
	t.Helper()
	tn := newTenancy(t, c, tc.admitBoth)
	obj, err := tc.attack(tn)
	if len(tc.apiError) > 0 {
		tn.g.Expect(err).To(HaveOccurred(), "the API accepted the attack")
		for _, part := range tc.apiError {
			tn.g.Expect(err.Error()).To(ContainSubstring(part))
		}
		tn.g.Expect(err.Error()).NotTo(ContainSubstring(tn.password), "the API's error quotes the password")
		return
	}
	tn.g.Expect(err).NotTo(HaveOccurred())
	tn.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(tn.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		cond := meta.FindStatusCondition(conditions(obj), tc.condition)
		g.Expect(cond).NotTo(BeNil(), "no %s condition", tc.condition)
		g.Expect(cond.Reason).To(Equal(tc.reason), "message %q", cond.Message)
		for _, part := range tc.message {
			g.Expect(cond.Message).To(ContainSubstring(part))
		}
		if tc.then != nil {
			tc.then(g, tn, obj)
		}
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	tn.noCredentialShown()
}

// noCredentialShown checks every status and Event in the tenants' namespaces for the
// row's credentials and password.
func (tn *tenancy) noCredentialShown() {
	tn.t.Helper()
	forbidden := append([]string{tn.password}, tn.secrets...)
	texts := make([]string, 0, 16)
	for _, ns := range []string{tn.a, tn.b} {
		vms := &banlieuev1.VirtualMachineList{}
		tn.g.Expect(k8sClient.List(tn.ctx, vms, client.InNamespace(ns))).To(Succeed())
		for i := range vms.Items {
			texts = append(texts, fmt.Sprintf("%+v", vms.Items[i].Status))
		}
		for _, list := range []client.ObjectList{&infrav1.VSphereMachineList{}, &infrav1.ProxmoxMachineList{}} {
			tn.g.Expect(k8sClient.List(tn.ctx, list, client.InNamespace(ns))).To(Succeed())
			texts = append(texts, fmt.Sprintf("%+v", list))
		}
		events := &eventsv1.EventList{}
		tn.g.Expect(k8sClient.List(tn.ctx, events, client.InNamespace(ns))).To(Succeed())
		for i := range events.Items {
			texts = append(texts, events.Items[i].Note)
		}
	}
	for _, text := range texts {
		for _, secret := range forbidden {
			tn.g.Expect(text).NotTo(ContainSubstring(secret), "a status or Event in a tenant's namespace shows a credential")
		}
	}
}
