package providersdk_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// TestAdmission is what a machine written by hand (a tenant, a Cluster API template)
// may ask of its Provider: each row is one attempt to get more than the Provider offers
// the machine's namespace, refused with NotPermitted, a message about the machine's own
// Provider only, and no backend VM made; or a machine as core writes it, admitted.
func TestAdmission(t *testing.T) {
	fast := map[string]string{"datastore": "ds-ssd"}
	prod := map[string]string{"network": "prod-net"}
	capabilities := func(p *banlieuev1.Provider) {
		p.Spec.Capabilities = banlieuev1.Capabilities{
			StorageClasses: []banlieuev1.ClassMapping{{Name: "fast", Target: fast}},
			NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod", Target: prod}},
		}
		p.Spec.Parameters = map[string]string{"datastore": "ds-default"}
	}
	withDisk := func(class string, target map[string]string) func(*testv1.TestMachine) {
		return func(m *testv1.TestMachine) {
			m.Spec.Disks = []infrav1.MachineDisk{{Name: "root", SizeGiB: 10, StorageClass: class, Target: target}}
		}
	}
	tests := []struct {
		name     string
		provider func(*banlieuev1.Provider)
		// arrange runs once the Provider exists, before the machine is created.
		arrange func(e *env)
		machine func(*testv1.TestMachine)
		// connects says whether the backend may be reached at all: admission of the
		// Provider, namespace and targets comes before any backend call; the image's
		// comes after Observe, before Create.
		connects bool
		// want is the Ready reason; message are parts of its message.
		want    string
		message []string
	}{
		{
			name:    "A machine as core writes it, with its Provider's own targets, is admitted.",
			machine: withDisk("fast", fast),
			want:    infrav1.MachineProvisionedReason, connects: true,
		},
		{
			name:    "A machine whose disk target is empty gets the Provider's defaults and is admitted.",
			machine: withDisk("fast", nil),
			want:    infrav1.MachineProvisionedReason, connects: true,
		},
		{
			name:    "A machine whose disk target spells out the Provider's default parameters is admitted.",
			machine: withDisk("fast", map[string]string{"datastore": "ds-default"}),
			want:    infrav1.MachineProvisionedReason, connects: true,
		},
		{
			name: "A machine on a Provider whose namespaceSelector excludes its namespace is refused.",
			provider: func(p *banlieuev1.Provider) {
				p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"tenant": "b"}}
			},
			want:    infrav1.MachineNotPermittedReason,
			message: []string{"does not admit namespace", "namespaceSelector"},
		},
		{
			name: "A machine on a Provider whose namespaceSelector admits its namespace's labels is admitted.",
			provider: func(p *banlieuev1.Provider) {
				p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}}
			},
			arrange: func(e *env) { e.labelNamespace(map[string]string{"tenant": "a"}) },
			want:    infrav1.MachineProvisionedReason, connects: true,
		},
		{
			name:    "A machine in a failure domain its Provider does not publish is refused.",
			machine: func(m *testv1.TestMachine) { m.Spec.FailureDomain = "other-tenants-cluster" },
			want:    infrav1.MachineNotPermittedReason,
			message: []string{`no failure domain "other-tenants-cluster"`},
		},
		{
			name:    "A machine whose disk asks for a storage class its Provider does not offer is refused.",
			machine: withDisk("gold", nil),
			want:    infrav1.MachineNotPermittedReason,
			message: []string{`no storage class "gold"`, "spec.disks[0]"},
		},
		{
			name:    "A machine whose disk target names another datastore is refused.",
			machine: withDisk("fast", map[string]string{"datastore": "ds-tenant-b"}),
			want:    infrav1.MachineNotPermittedReason,
			message: []string{"spec.disks[0].target", `storage class "fast"`},
		},
		{
			name: "A machine whose interface target names another network is refused.",
			machine: func(m *testv1.TestMachine) {
				m.Spec.Interfaces = []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: map[string]string{"network": "tenant-b-net"}}}
			},
			want:    infrav1.MachineNotPermittedReason,
			message: []string{"spec.interfaces[0].target", `network class "prod"`},
		},
		{
			name:     "A machine on a Provider of another provider class is refused.",
			provider: func(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = "vsphere" },
			want:     infrav1.MachineNotPermittedReason,
			message:  []string{`of provider class "vsphere"`},
		},
		{
			name:     "A machine on a Provider being deleted is refused before its VM is made.",
			provider: func(p *banlieuev1.Provider) { p.Finalizers = []string{"test.banlieue.io/hold"} },
			arrange: func(e *env) {
				if err := k8s.Delete(e.ctx, e.provider); err != nil {
					e.t.Fatal(err)
				}
			},
			want:    infrav1.MachineNotPermittedReason,
			message: []string{"is being deleted"},
		},
		{
			name:     "A machine whose image is no VMImage is refused.",
			machine:  func(m *testv1.TestMachine) { m.Spec.Image.Name = "hand-made" },
			connects: true, want: infrav1.MachineNotPermittedReason,
			message: []string{`VMImage "hand-made"`},
		},
		{
			name:     "A machine cloning another VM by its reference instead of its VMImage's template is refused.",
			machine:  func(m *testv1.TestMachine) { m.Spec.Image.Ref = "vm-1042" },
			connects: true, want: infrav1.MachineNotPermittedReason,
			message: []string{"spec.image is not VMImage"},
		},
		{
			name:     "A machine whose resolvedRef is not its Provider's row of the VMImage is refused.",
			machine:  func(m *testv1.TestMachine) { m.Spec.Image.ResolvedRef = "vm-1042" },
			connects: true, want: infrav1.MachineNotPermittedReason,
			message: []string{"spec.image.resolvedRef"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mods := []func(*banlieuev1.Provider){capabilities}
			if tt.provider != nil {
				mods = append(mods, tt.provider)
			}
			e := newEnv(t, mods...)
			if tt.arrange != nil {
				tt.arrange(e)
			}
			backend := provider.NewDriver()
			var connects atomic.Int32
			counting := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
				connects.Add(1)
				return backend.Connect(ctx, info)
			})
			r := providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind(provider.MachineKind.Kind), counting,
				providersdk.WithFinalizer(provider.Finalizer), providersdk.WithClass(provider.ProviderClass))
			var m *testv1.TestMachine
			if tt.machine != nil {
				m = e.machine("web", tt.machine)
			} else {
				m = e.machine("web")
			}
			_, _ = e.reconcile(r, m)

			got := readyOf(e.get(m))
			if got.Reason != tt.want {
				t.Fatalf("Ready = %+v, want reason %s", got, tt.want)
			}
			for _, part := range tt.message {
				if !strings.Contains(got.Message, part) {
					t.Errorf("Ready message %q does not say %q", got.Message, part)
				}
			}
			if tt.want == infrav1.MachineNotPermittedReason {
				if backend.Creates() != 0 {
					t.Errorf("the backend made %d VMs for a refused machine", backend.Creates())
				}
				if n := connects.Load(); !tt.connects && n != 0 {
					t.Errorf("the backend was reached %d times before the refusal", n)
				}
				if !strings.Contains(got.Message, "Provider "+e.ns+"/p1") && !strings.Contains(got.Message, "VMImage") && !strings.Contains(got.Message, "spec.image") {
					t.Errorf("Ready message %q names neither the machine's Provider nor its image", got.Message)
				}
			}
		})
	}
}

// labelNamespace sets the labels of the env's namespace.
func (e *env) labelNamespace(labels map[string]string) {
	e.t.Helper()
	ns := &corev1.Namespace{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Name: e.ns}, ns); err != nil {
		e.t.Fatal(err)
	}
	ns.Labels = labels
	if err := k8s.Update(e.ctx, ns); err != nil {
		e.t.Fatal(err)
	}
}
