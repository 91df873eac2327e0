package providersdk_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

var (
	capiMachineGVK = schema.GroupVersionKind{Group: providersdk.ClusterAPIGroup, Version: "v1beta2", Kind: "Machine"}
	capiClusterGVK = schema.GroupVersionKind{Group: providersdk.ClusterAPIGroup, Version: "v1beta2", Kind: "Cluster"}
)

// recorder is the test backend, recording what each Create was handed.
type recorder struct {
	*provider.Driver
	mu       sync.Mutex
	userData map[types.UID][]byte
	domains  map[types.UID]string
}

func newRecorder() *recorder {
	return &recorder{Driver: provider.NewDriver(), userData: map[types.UID][]byte{}, domains: map[types.UID]string{}}
}

func (d *recorder) Connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	s, err := d.Driver.Connect(ctx, info)
	if err != nil {
		return nil, err
	}
	return providersdk.ClientFns{
		ObserveFn: s.Observe,
		CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
			d.mu.Lock()
			d.userData[m.UID], d.domains[m.UID] = m.UserData, m.Spec.FailureDomain
			d.mu.Unlock()
			return s.Create(ctx, m, obs)
		},
		UpdateFn:     s.Update,
		DeleteFn:     s.Delete,
		DisconnectFn: s.Disconnect,
	}, nil
}

// created returns what Create was handed for the machine; false when it was not called.
func (d *recorder) created(uid types.UID) (userData, domain string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ud, ok := d.userData[uid]
	return string(ud), d.domains[uid], ok
}

func (d *recorder) reconciler() *providersdk.Reconciler {
	return providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
}

// cluster creates a Cluster API Cluster, its infrastructure provisioned or not.
func (e *env) cluster(name string, provisioned bool, mods ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	e.t.Helper()
	c := &unstructured.Unstructured{}
	c.SetGroupVersionKind(capiClusterGVK)
	c.SetNamespace(e.ns)
	c.SetName(name)
	_ = unstructured.SetNestedField(c.Object, map[string]any{}, "spec")
	for _, m := range mods {
		m(c)
	}
	e.create(c)
	e.provision(c, provisioned)
	return c
}

// provision sets the Cluster's status.initialization.infrastructureProvisioned.
func (e *env) provision(c *unstructured.Unstructured, provisioned bool) {
	e.t.Helper()
	_ = unstructured.SetNestedField(c.Object, provisioned, "status", "initialization", "infrastructureProvisioned")
	if err := k8s.Status().Update(e.ctx, c); err != nil {
		e.t.Fatal(err)
	}
}

// patchCAPI merge-patches a Cluster API object.
func (e *env) patchCAPI(o *unstructured.Unstructured, patch string) {
	e.t.Helper()
	if err := k8s.Patch(e.ctx, o, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		e.t.Fatal(err)
	}
}

// capiMachine creates a Cluster API Machine of the Cluster c1 whose infrastructureRef
// is the TestMachine web, every test's; spec is merged into its spec.
func (e *env) capiMachine(name string, spec map[string]any) *unstructured.Unstructured {
	e.t.Helper()
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(capiMachineGVK)
	m.SetNamespace(e.ns)
	m.SetName(name)
	s := map[string]any{
		"clusterName":       "c1",
		"bootstrap":         map[string]any{},
		"infrastructureRef": map[string]any{"apiGroup": testv1.GroupVersion.Group, "kind": "TestMachine", "name": "web"},
	}
	for k, v := range spec {
		s[k] = v
	}
	m.Object["spec"] = s
	e.create(m)
	return m
}

// bootstrapSecret creates a bootstrap data Secret as Cluster API's bootstrap providers do.
func (e *env) bootstrapSecret(name string, typ corev1.SecretType, data map[string]string) {
	e.t.Helper()
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Type: typ, StringData: data})
}

// ownedBy labels a TestMachine with the cluster's name and, when owner is set, makes
// that Machine its owner, as Cluster API's controllers do.
func ownedBy(cluster string, owner *unstructured.Unstructured) func(*testv1.TestMachine) {
	return func(m *testv1.TestMachine) {
		m.Labels = map[string]string{providersdk.ClusterNameLabel: cluster}
		if owner != nil {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: capiMachineGVK.GroupVersion().String(), Kind: "Machine", Name: owner.GetName(), UID: owner.GetUID()}}
		}
	}
}

// withDomains publishes failure domains on the env's Provider, for admission.
func (e *env) withDomains(names ...string) {
	e.t.Helper()
	p := &banlieuev1.Provider{}
	if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(e.provider), p); err != nil {
		e.t.Fatal(err)
	}
	for _, n := range names {
		p.Status.FailureDomains = append(p.Status.FailureDomains, banlieuev1.FailureDomain{Name: n})
	}
	if err := k8s.Status().Update(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
}

// pausedOf is the machine's Paused condition as "<status>: <message>".
func pausedOf(m *testv1.TestMachine) string {
	c := meta.FindStatusCondition(m.Status.Conditions, infrav1.MachinePausedCondition)
	if c == nil {
		return ""
	}
	return string(c.Status) + ": " + c.Message
}

// TestClusterAPIMachines is what a machine Cluster API made waits for before its VM is
// made, and what of its Machine it takes: each row arranges the Cluster API objects and
// the machine, reconciles once (without watches, so a wait looks again in 30 s) and
// checks the Ready condition and what the backend was handed.
func TestClusterAPIMachines(t *testing.T) {
	const value = "#cloud-config\nhostname: from-bootstrap\n"
	tests := []struct {
		name string
		// arrange makes the Cluster API objects and returns the machine's mods.
		arrange func(e *env) []func(*testv1.TestMachine)
		// want is the Ready reason; message are parts of its message.
		want    string
		message []string
		// paused is the Paused condition wanted, as pausedOf gives it; "" for False.
		paused string
		// userData and domain are what Create was handed; none when it must not be called.
		created          bool
		userData, domain string
		// status is the status.failureDomain wanted.
		status string
	}{
		{
			name: "A labelled machine without a Machine owner waits to be adopted.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				return []func(*testv1.TestMachine){ownedBy("c1", nil)}
			},
			want:    infrav1.MachineWaitingForMachineOwnerReason,
			message: []string{"Cluster API's Machine controller has not adopted it yet"},
		},
		{
			name: "An owned machine whose Cluster does not exist waits for the Cluster's infrastructure.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", nil))}
			},
			want:    infrav1.MachineWaitingForClusterInfrastructureReason,
			message: []string{"Cluster NS/c1 does not exist"},
		},
		{
			name: "An owned machine whose Cluster's infrastructure is not provisioned waits.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", false)
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", nil))}
			},
			want:    infrav1.MachineWaitingForClusterInfrastructureReason,
			message: []string{"infrastructureProvisioned is not true"},
		},
		{
			name: "An owned machine whose Machine has no dataSecretName waits for the bootstrap data.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", nil))}
			},
			want:    infrav1.MachineWaitingForBootstrapDataReason,
			message: []string{"Machine NS/m1 has no spec.bootstrap.dataSecretName"},
		},
		{
			name: "With bootstrap data the driver is handed the Secret's value, not spec.userData's.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": value, "format": "cloud-config"})
				e.bootstrapSecret("own", banlieuev1.UserDataSecretType, map[string]string{"user-data": "#cloud-config\nhostname: own\n"})
				m := e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}})
				return []func(*testv1.TestMachine){ownedBy("c1", m), func(m *testv1.TestMachine) {
					m.Spec.UserData = &banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "own"}}
				}}
			},
			want:    infrav1.MachineProvisionedReason,
			created: true, userData: value,
		},
		{
			name: "A missing bootstrap data Secret is UserDataNotFound, naming the Machine.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}}))}
			},
			want:    infrav1.MachineUserDataNotFoundReason,
			message: []string{"NS/m1-bootstrap", "Machine NS/m1's spec.bootstrap.dataSecretName", "does not exist"},
		},
		{
			name: "A bootstrap data Secret without the key value is UserDataNotFound.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"format": "cloud-config"})
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}}))}
			},
			want:    infrav1.MachineUserDataNotFoundReason,
			message: []string{`has no key "value"`, `["format"]`},
		},
		{
			name: "A bootstrap data Secret of another type is not handed to the guest.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", corev1.SecretTypeOpaque, map[string]string{"value": value})
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}}))}
			},
			want:    infrav1.MachineUserDataNotPermittedReason,
			message: []string{"of type \"Opaque\""},
		},
		{
			name: "The Machine's failure domain is used when the machine's own is empty.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.withDomains("fd-a", "fd-b")
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": value})
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", map[string]any{
					"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}, "failureDomain": "fd-b",
				}))}
			},
			want:    infrav1.MachineProvisionedReason,
			created: true, userData: value, domain: "fd-b", status: "fd-b",
		},
		{
			name: "The machine's own failure domain wins over the Machine's.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.withDomains("fd-a", "fd-b")
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": value})
				m := e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}, "failureDomain": "fd-b"})
				return []func(*testv1.TestMachine){ownedBy("c1", m), func(m *testv1.TestMachine) { m.Spec.FailureDomain = "fd-a" }}
			},
			want:    infrav1.MachineProvisionedReason,
			created: true, userData: value, domain: "fd-a", status: "fd-a",
		},
		{
			name: "A Machine's failure domain the Provider does not publish is refused by admission.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.withDomains("fd-a")
				e.cluster("c1", true)
				e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": value})
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", map[string]any{
					"bootstrap": map[string]any{"dataSecretName": "m1-bootstrap"}, "failureDomain": "fd-z",
				}))}
			},
			want:    infrav1.MachineNotPermittedReason,
			message: []string{`no failure domain "fd-z"`},
		},
		{
			name: "A Cluster paused by spec.paused pauses its machines.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true, func(c *unstructured.Unstructured) { _ = unstructured.SetNestedField(c.Object, true, "spec", "paused") })
				return []func(*testv1.TestMachine){ownedBy("c1", e.capiMachine("m1", nil))}
			},
			paused: "True: Cluster NS/c1 is paused (spec.paused)",
		},
		{
			name: "A Cluster with the paused annotation pauses its machines, even one not adopted yet.",
			arrange: func(e *env) []func(*testv1.TestMachine) {
				e.cluster("c1", true, func(c *unstructured.Unstructured) {
					c.SetAnnotations(map[string]string{providersdk.PausedAnnotation: ""})
				})
				return []func(*testv1.TestMachine){ownedBy("c1", nil)}
			},
			paused: "True: Cluster NS/c1 carries the annotation " + providersdk.PausedAnnotation,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			d := newRecorder()
			mods := tt.arrange(e)
			m := e.machine("web", mods...)
			res, err := e.reconcile(d.reconciler(), m)
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			got := e.get(m)
			r := readyOf(got)
			if tt.want != "" && r.Reason != tt.want {
				t.Errorf("Ready = %+v, want reason %s", r, tt.want)
			}
			for _, part := range tt.message {
				if part = strings.ReplaceAll(part, "NS", e.ns); !strings.Contains(r.Message, part) {
					t.Errorf("Ready message %q does not contain %q", r.Message, part)
				}
			}
			wantPaused := "False: "
			if tt.paused != "" {
				wantPaused = strings.ReplaceAll(tt.paused, "NS", e.ns)
			}
			if p := pausedOf(got); p != wantPaused {
				t.Errorf("Paused = %q, want %q", p, wantPaused)
			}
			if strings.HasPrefix(tt.want, "WaitingFor") && res.RequeueAfter != 30*time.Second {
				t.Errorf("a waiting machine, unwatched, requeues after %v, want 30s", res.RequeueAfter)
			}
			ud, fd, created := d.created(got.UID)
			if created != tt.created {
				t.Fatalf("Create called = %t, want %t", created, tt.created)
			}
			if diff := cmp.Diff(tt.userData, ud); diff != "" {
				t.Errorf("user data handed to the driver (-want +got):\n%s", diff)
			}
			if fd != tt.domain {
				t.Errorf("failure domain handed to the driver = %q, want %q", fd, tt.domain)
			}
			if got.Status.FailureDomain != tt.status {
				t.Errorf("status.failureDomain = %q, want %q", got.Status.FailureDomain, tt.status)
			}
		})
	}
}

// TestAMachineTakingTheMachinesFailureDomainIsNotRewritten checks that the Machine's
// failure domain is used in memory only: the machine's spec keeps none.
func TestAMachineTakingTheMachinesFailureDomainIsNotRewritten(t *testing.T) {
	e := newEnv(t)
	e.withDomains("fd-b")
	e.cluster("c1", true)
	e.bootstrapSecret("b", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "x"})
	m := e.machine("web", ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "b"}, "failureDomain": "fd-b"})))
	e.mustReconcile(newRecorder().reconciler(), m)
	got := e.get(m)
	if got.Spec.FailureDomain != "" || got.Status.FailureDomain != "fd-b" {
		t.Errorf("spec.failureDomain %q, status.failureDomain %q; want none and fd-b", got.Spec.FailureDomain, got.Status.FailureDomain)
	}
}

// TestAPausedClusterHoldsAPowerChangeUntilUnpaused: a provisioned machine whose Cluster
// is paused, by spec.paused and then by the annotation, is not touched; unpaused, the
// change is made.
func TestAPausedClusterHoldsAPowerChangeUntilUnpaused(t *testing.T) {
	for _, tt := range []struct {
		name           string
		pause, unpause string
	}{
		{"spec.paused", `{"spec":{"paused":true}}`, `{"spec":{"paused":false}}`},
		{"annotation", `{"metadata":{"annotations":{"cluster.x-k8s.io/paused":""}}}`, `{"metadata":{"annotations":{"cluster.x-k8s.io/paused":null}}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			d := newRecorder()
			r := d.reconciler()
			c := e.cluster("c1", true)
			e.bootstrapSecret("b", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "x"})
			m := e.machine("web", ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "b"}})))
			e.mustReconcile(r, m)
			if got := readyOf(e.get(m)); got.Reason != infrav1.MachineProvisionedReason {
				t.Fatalf("Ready = %+v, want Provisioned", got)
			}

			e.patchCAPI(c, tt.pause)
			e.update(m, func(m *testv1.TestMachine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff })
			e.mustReconcile(r, m)
			got := e.get(m)
			if vm, _ := d.VM(got.UID); vm.PowerState != banlieuev1.PowerStatePoweredOn {
				t.Errorf("the VM's power state changed to %s while the Cluster was paused", vm.PowerState)
			}
			if p := pausedOf(got); !strings.HasPrefix(p, "True: Cluster "+e.ns+"/c1") {
				t.Errorf("Paused = %q, want True naming the Cluster", p)
			}

			e.patchCAPI(c, tt.unpause)
			e.mustReconcile(r, m)
			got = e.get(m)
			if vm, _ := d.VM(got.UID); vm.PowerState != banlieuev1.PowerStatePoweredOff {
				t.Errorf("the VM's power state is %s once unpaused, want PoweredOff", vm.PowerState)
			}
			if p := pausedOf(got); p != "False: " {
				t.Errorf("Paused = %q once unpaused, want False", p)
			}
		})
	}
}

// TestAMachineWithAVMNeitherWaitsNorBlocksItsDeletion: once the VM exists, a Cluster
// whose infrastructure is no longer provisioned, or that is gone, does not stop the
// machine from being observed, nor from being deleted.
func TestAMachineWithAVMNeitherWaitsNorBlocksItsDeletion(t *testing.T) {
	e := newEnv(t)
	d := newRecorder()
	r := d.reconciler()
	c := e.cluster("c1", true)
	e.bootstrapSecret("b", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "x"})
	m := e.machine("web", ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "b"}})))
	e.mustReconcile(r, m)

	e.provision(c, false)
	e.mustReconcile(r, m)
	if got := readyOf(e.get(m)); got.Reason != infrav1.MachineProvisionedReason {
		t.Errorf("Ready = %+v with the Cluster's infrastructure unprovisioned, want Provisioned: a machine with a VM does not wait", got)
	}

	if err := k8s.Delete(e.ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there (finalizers %v, Ready %+v): deletion waited", got.Finalizers, readyOf(got))
	}
	if _, ok := d.VM(m.UID); ok {
		t.Error("the VM is still on the backend")
	}
}

// capiReads counts the Cluster API objects a client reads.
type capiReads struct {
	client.Client
	mu sync.Mutex
	n  int
}

func (c *capiReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.count(obj)
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *capiReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.count(list)
	return c.Client.List(ctx, list, opts...)
}

func (c *capiReads) count(o any) {
	if u, ok := o.(interface {
		GroupVersionKind() schema.GroupVersionKind
	}); ok && u.GroupVersionKind().Group == providersdk.ClusterAPIGroup {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *capiReads) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestAPlainMachineMakesNoClusterAPIReads: a machine that has neither a Cluster API
// owner nor the cluster-name label (core's, or one written by hand) is made and deleted
// as before, without a single read of a Cluster API object, while a Cluster API
// machine of the same reconciler does read them (the counter works).
func TestAPlainMachineMakesNoClusterAPIReads(t *testing.T) {
	e := newEnv(t)
	c := &capiReads{Client: k8s}
	d := newRecorder()
	r := providersdk.NewReconciler(c, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
	// A Cluster of the same name as the machine, paused: were it read, it would pause.
	e.cluster("web", false, func(c *unstructured.Unstructured) { _ = unstructured.SetNestedField(c.Object, true, "spec", "paused") })
	m := e.machine("web")
	e.mustReconcile(r, m)
	if got := readyOf(e.get(m)); got.Reason != infrav1.MachineProvisionedReason {
		t.Errorf("Ready = %+v, want Provisioned", got)
	}
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if e.get(m) != nil {
		t.Error("the plain machine was not deleted")
	}
	if n := c.reads(); n != 0 {
		t.Errorf("a plain machine cost %d Cluster API reads, want 0", n)
	}

	labelled := e.machine("db", ownedBy("web", nil))
	e.mustReconcile(r, labelled)
	if c.reads() == 0 {
		t.Error("a labelled machine made no Cluster API read: the counter counts nothing")
	}
}

// awaitReady waits until the machine's Ready condition has reason, or fails after 20 s.
func (e *env) awaitReady(m *testv1.TestMachine, reason string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := e.get(m)
		if got != nil && readyOf(got).Reason == reason {
			return
		}
		if time.Now().After(deadline) {
			var r ready
			if got != nil {
				r = readyOf(got)
			}
			e.t.Fatalf("machine %s: Ready is %+v after 20s, want reason %s", m.Name, r, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTheWatchesWakeAWaitingMachine runs Setup's controllers: a machine waiting for
// bootstrap data is made as soon as the Machine's dataSecretName is set, and a Cluster
// unpaused resumes it, both woken by the watches (no 30 s fallback: the CRDs are
// installed, so a waiting machine is not requeued).
func TestTheWatchesWakeAWaitingMachine(t *testing.T) {
	e := newEnv(t)
	d := newRecorder()
	e.run(providersdk.Config{Class: provider.ProviderClass, MachineKind: testMachineGVK, Driver: d,
		MachineOptions: []providersdk.Option{providersdk.WithFinalizer(provider.Finalizer)}})
	c := e.cluster("c1", false)
	owner := e.capiMachine("m1", nil)
	m := e.machine("web", ownedBy("c1", nil))
	e.awaitReady(m, infrav1.MachineWaitingForMachineOwnerReason)

	// Adoption: Cluster API's Machine controller sets the owner on the machine.
	e.update(m, ownedBy("c1", owner))
	e.awaitReady(m, infrav1.MachineWaitingForClusterInfrastructureReason)

	// The Cluster's infrastructure is provisioned: a status write of the Cluster.
	e.provision(c, true)
	e.awaitReady(m, infrav1.MachineWaitingForBootstrapDataReason)

	// A paused Cluster holds the machine even once the data is there.
	e.patchCAPI(c, `{"spec":{"paused":true}}`)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasPrefix(pausedOf(e.get(m)), "True") {
		if time.Now().After(deadline) {
			t.Fatalf("Paused = %q after 20s, want True", pausedOf(e.get(m)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.bootstrapSecret("m1-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "payload"})
	e.patchCAPI(owner, `{"spec":{"bootstrap":{"dataSecretName":"m1-bootstrap"}}}`)
	time.Sleep(time.Second)
	if _, _, ok := d.created(m.UID); ok {
		t.Fatal("a VM was made while the Cluster was paused")
	}

	e.patchCAPI(c, `{"spec":{"paused":false}}`)
	e.awaitReady(m, infrav1.MachineProvisionedReason)
	got := e.get(m)
	if ud, _, ok := d.created(got.UID); !ok || ud != "payload" {
		t.Errorf("Create handed user data %q (called %t), want the bootstrap Secret's value", ud, ok)
	}
	if p := pausedOf(got); p != "False: " {
		t.Errorf("Paused = %q, want False", p)
	}
}

// TestTheWatchWakesAMachineWhenItsBootstrapDataIsWritten: the shortest path, a Machine
// that gets its dataSecretName once its infrastructure machine waits for it.
func TestTheWatchWakesAMachineWhenItsBootstrapDataIsWritten(t *testing.T) {
	e := newEnv(t)
	d := newRecorder()
	e.run(providersdk.Config{Class: provider.ProviderClass, MachineKind: testMachineGVK, Driver: d,
		MachineOptions: []providersdk.Option{providersdk.WithFinalizer(provider.Finalizer)}})
	e.cluster("c1", true)
	owner := e.capiMachine("m2", nil)
	m := e.machine("web", ownedBy("c1", owner))
	e.awaitReady(m, infrav1.MachineWaitingForBootstrapDataReason)
	e.bootstrapSecret("m2-bootstrap", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "payload"})
	e.patchCAPI(owner, `{"spec":{"bootstrap":{"dataSecretName":"m2-bootstrap"}}}`)
	e.awaitReady(m, infrav1.MachineProvisionedReason)
	if ud, _, _ := d.created(m.UID); ud != "payload" {
		t.Errorf("Create handed user data %q, want the bootstrap Secret's value", ud)
	}
}

// TestTheWatchScopeLeavesOtherMachinesAlone runs Setup's controllers as `banlieue
// provider --namespace <tenant> --watch-filter blue` does, with Config.CacheOptions: the
// machine of the tenant namespace with the label is made, on a Provider of another
// namespace (Providers stay readable everywhere); machines elsewhere, without the label
// or with another filter's are left alone.
func TestTheWatchScopeLeavesOtherMachinesAlone(t *testing.T) {
	e := newEnv(t)
	tenant := e.ns + "-tenant"
	e.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})
	d := newRecorder()
	cfg := providersdk.Config{Class: provider.ProviderClass, MachineKind: testMachineGVK, Driver: d, Namespace: tenant, WatchFilter: "blue",
		MachineOptions: []providersdk.Option{providersdk.WithFinalizer(provider.Finalizer)}}
	e.run(cfg)

	in := func(ns string, labels map[string]string) func(*testv1.TestMachine) {
		return func(m *testv1.TestMachine) { m.Namespace, m.Labels = ns, labels }
	}
	blue := map[string]string{providersdk.WatchFilterLabel: "blue"}
	left := []*testv1.TestMachine{
		e.machine("elsewhere", in(e.ns, blue)),
		e.machine("unlabelled", in(tenant, nil)),
		e.machine("green", in(tenant, map[string]string{providersdk.WatchFilterLabel: "green"})),
	}
	m := e.machine("blue", in(tenant, blue))
	e.awaitReady(m, infrav1.MachineProvisionedReason)
	time.Sleep(time.Second)
	for _, o := range left {
		got := e.get(o)
		if len(got.Finalizers) != 0 || len(got.Status.Conditions) != 0 {
			t.Errorf("machine %s/%s was reconciled (finalizers %v, Ready %+v)", got.Namespace, got.Name, got.Finalizers, readyOf(got))
		}
		if _, _, ok := d.created(got.UID); ok {
			t.Errorf("machine %s/%s got a VM", got.Namespace, got.Name)
		}
	}
}

// TestClusterAPIIsFoundInstalledOrNot asks a manager's RESTMapper, as Setup does, about
// kinds the API server serves (Cluster API's stand-ins) and about a group it does not:
// the second is "not installed", not an error.
func TestClusterAPIIsFoundInstalledOrNot(t *testing.T) {
	if suite == nil {
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	mgr, err := ctrl.NewManager(suite.Config, ctrl.Options{Scheme: suite.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		gvks []schema.GroupVersionKind
		want bool
	}{
		{"installed", []schema.GroupVersionKind{capiMachineGVK, capiClusterGVK}, true},
		{"a group not served", []schema.GroupVersionKind{capiMachineGVK, {Group: "nothing.example.com", Version: "v1", Kind: "Thing"}}, false},
		{"a version not served", []schema.GroupVersionKind{{Group: providersdk.ClusterAPIGroup, Version: "v1beta9", Kind: "Machine"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := providersdk.KindsServed(mgr.GetRESTMapper(), tc.gvks...)
			if err != nil || got != tc.want {
				t.Errorf("KindsServed = %t, %v; want %t, no error", got, err, tc.want)
			}
		})
	}
}

// capiForbidden refuses every read of a Cluster API object, as an API server does to a
// provider whose Role lacks them.
type capiForbidden struct{ client.Client }

func (c capiForbidden) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind().Group == providersdk.ClusterAPIGroup {
		return apierrors.NewForbidden(schema.GroupResource{Group: providersdk.ClusterAPIGroup, Resource: "clusters"}, key.Name, errors.New("no access"))
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestUnreadableClusterAPIObjectsFailAReconcileButNotADeletion: a managed machine whose
// Cluster API objects cannot be read is not made, with the error; deleted, its VM goes.
func TestUnreadableClusterAPIObjectsFailAReconcileButNotADeletion(t *testing.T) {
	e := newEnv(t)
	d := newRecorder()
	e.cluster("c1", true)
	e.bootstrapSecret("b", banlieuev1.ClusterAPIBootstrapSecretType, map[string]string{"value": "x"})
	m := e.machine("web", ownedBy("c1", e.capiMachine("m1", map[string]any{"bootstrap": map[string]any{"dataSecretName": "b"}})))
	e.mustReconcile(d.reconciler(), m)

	r := providersdk.NewReconciler(capiForbidden{k8s}, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
	if _, err := e.reconcile(r, m); !apierrors.IsForbidden(err) {
		t.Errorf("reconcile error = %v, want the Forbidden read", err)
	}
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if e.get(m) != nil {
		t.Error("the machine is still there: its deletion waited on Cluster API")
	}
	if _, ok := d.VM(m.UID); ok {
		t.Error("the VM is still on the backend")
	}
}
