package providersdk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

var nsSeq atomic.Int64

// env is one test's namespace on the shared API server, with a Provider in it.
type env struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	provider *banlieuev1.Provider
}

func newEnv(t *testing.T, mods ...func(*banlieuev1.Provider)) *env {
	t.Helper()
	if k8s == nil {
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	e := &env{t: t, ctx: context.Background(), ns: fmt.Sprintf("sdk%d-%s", nsSeq.Add(1), strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())))}
	if len(e.ns) > 63 {
		e.ns = strings.TrimRight(e.ns[:63], "-")
	}
	e.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}})
	e.provider = &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "p1"},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: provider.ProviderClass},
			Connection:       banlieuev1.Connection{Endpoint: "test://p1"},
		},
	}
	for _, m := range mods {
		m(e.provider)
	}
	e.create(e.provider)
	return e
}

func (e *env) create(o client.Object) {
	e.t.Helper()
	if err := k8s.Create(e.ctx, o); err != nil {
		e.t.Fatal(err)
	}
}

// machine creates a TestMachine on the env's Provider, as core would.
func (e *env) machine(name string, mods ...func(*testv1.TestMachine)) *testv1.TestMachine {
	e.t.Helper()
	m := &testv1.TestMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: testv1.TestMachineSpec{MachineSpec: infrav1.MachineSpec{
			ProviderRef: infrav1.ProviderRef{Namespace: e.ns, Name: e.provider.Name},
			Image:       infrav1.MachineImage{Name: "ubuntu", Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-tpl"},
			Hardware:    infrav1.MachineHardware{CPUs: 2, MemoryMiB: 2048},
			PowerState:  banlieuev1.PowerStatePoweredOn,
		}},
	}
	for _, mod := range mods {
		mod(m)
	}
	e.create(m)
	return m
}

// update re-reads the machine, changes it with mod and writes it.
func (e *env) update(m *testv1.TestMachine, mod func(*testv1.TestMachine)) {
	e.t.Helper()
	got := e.get(m)
	mod(got)
	if err := k8s.Update(e.ctx, got); err != nil {
		e.t.Fatal(err)
	}
}

// get re-reads the machine; it returns nil once the machine is gone.
func (e *env) get(m *testv1.TestMachine) *testv1.TestMachine {
	e.t.Helper()
	got := &testv1.TestMachine{}
	if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(m), got); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return got
}

func (e *env) reconcile(r *providersdk.Reconciler, m *testv1.TestMachine) (ctrl.Result, error) {
	return r.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)})
}

// mustReconcile reconciles and fails the test on an error.
func (e *env) mustReconcile(r *providersdk.Reconciler, m *testv1.TestMachine) ctrl.Result {
	e.t.Helper()
	res, err := e.reconcile(r, m)
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// run runs Setup's controllers for cfg in a manager that caches the env's namespace,
// until the test ends.
func (e *env) run(cfg providersdk.Config) {
	e.t.Helper()
	mgr, err := ctrl.NewManager(suite.Config, ctrl.Options{
		Scheme:     suite.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{e.ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := providersdk.Setup(mgr, cfg); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	})
}

// ready is the machine's Ready condition, reduced to what the tests compare.
type ready struct{ Status, Reason, Message string }

func readyOf(m *testv1.TestMachine) ready {
	c := meta.FindStatusCondition(m.Status.Conditions, banlieuev1.ReadyCondition)
	if c == nil {
		return ready{}
	}
	return ready{string(c.Status), c.Reason, c.Message}
}

func TestCreateMakesTheMachineReady(t *testing.T) {
	e := newEnv(t)
	d := provider.NewDriver()
	r := provider.NewReconciler(k8s, d)
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
		t.Errorf("requeue after %v, want none for a ready machine", res.RequeueAfter)
	}
	got := e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("test://"+string(got.UID), got.Spec.ProviderID); diff != "" {
		t.Errorf("providerID (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: provider.Address}}, got.Status.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if got.Status.Initialization.Provisioned == nil || !*got.Status.Initialization.Provisioned {
		t.Error("status.initialization.provisioned is not true")
	}
	if got.Status.PowerState != banlieuev1.PowerStatePoweredOn || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("powerState %q, observedGeneration %d; want PoweredOn, %d", got.Status.PowerState, got.Status.ObservedGeneration, got.Generation)
	}
	if diff := cmp.Diff([]string{provider.Finalizer}, got.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}

	// An idle machine is not written again.
	e.mustReconcile(r, m)
	if again := e.get(m); again.ResourceVersion != got.ResourceVersion {
		t.Errorf("an idle reconcile wrote the machine (resourceVersion %s -> %s)", got.ResourceVersion, again.ResourceVersion)
	}
	if d.Creates() != 1 {
		t.Errorf("backend creates = %d, want 1", d.Creates())
	}
}

func TestAReconcileAfterACrashAdoptsTheVM(t *testing.T) {
	e := newEnv(t)
	backend := provider.NewDriver()
	// The first process dies right after the backend created the VM, before it wrote anything.
	crashing := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		real, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: real.Observe,
			CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
				if _, err := real.Create(ctx, m, obs); err != nil {
					return providersdk.CreateResult{}, err
				}
				return providersdk.CreateResult{}, errors.New("process killed")
			},
		}, nil
	})
	m := e.machine("db")
	if _, err := e.reconcile(providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind("TestMachine"), crashing, providersdk.WithFinalizer(provider.Finalizer)), m); err == nil {
		t.Fatal("the crashing reconcile succeeded")
	}
	if got := e.get(m); got.Spec.ProviderID != "" {
		t.Fatalf("the crashed reconcile wrote providerID %q", got.Spec.ProviderID)
	}
	if backend.Creates() != 1 {
		t.Fatalf("backend creates = %d after the crash, want 1", backend.Creates())
	}

	// Its successor has a new session cache but the same backend: it adopts the VM.
	e.mustReconcile(provider.NewReconciler(k8s, backend), m)
	got := e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if got.Spec.ProviderID != "test://"+string(got.UID) {
		t.Errorf("providerID = %q, want test://%s", got.Spec.ProviderID, got.UID)
	}
	if backend.Creates() != 1 {
		t.Errorf("backend creates = %d, want 1: the successor created a second VM", backend.Creates())
	}
}

func TestAPermanentErrorSetsReadyFalseAndDoesNotRequeue(t *testing.T) {
	e := newEnv(t)
	refusing := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
			return providersdk.CreateResult{}, fmt.Errorf("failed to clone: %w", providersdk.Permanent("TemplateNotFound", "template %q does not exist", "ubuntu-tpl"))
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind("TestMachine"), refusing)
	m := e.machine("web")
	res, err := e.reconcile(r, m)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("got (%v, %v), want no error and no requeue", res, err)
	}
	got := e.get(m)
	if diff := cmp.Diff(ready{"False", "TemplateNotFound", `template "ubuntu-tpl" does not exist`}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if got.Status.ObservedGeneration != 0 {
		t.Errorf("observedGeneration = %d after a failed reconcile, want 0", got.Status.ObservedGeneration)
	}
	if got.Spec.ProviderID != "" {
		t.Errorf("providerID = %q, want none", got.Spec.ProviderID)
	}
	if got.Status.FailureReason != "TemplateNotFound" || got.Status.FailureMessage != `template "ubuntu-tpl" does not exist` {
		t.Errorf("failure = %q: %q, want TemplateNotFound and the driver's message", got.Status.FailureReason, got.Status.FailureMessage)
	}
}

func TestTheFailureIsClearedOnceTheMachineIsFixed(t *testing.T) {
	e := newEnv(t)
	backend := provider.NewDriver()
	// The template is missing until the machine names another one.
	fussy := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		real, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: real.Observe,
			UpdateFn:  real.Update,
			CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
				if m.Spec.Image.Ref == "missing" {
					return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "no template %q", m.Spec.Image.Ref)
				}
				return real.Create(ctx, m, obs)
			},
		}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, fussy, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web", func(m *testv1.TestMachine) { m.Spec.Image.Ref = "missing" })
	e.mustReconcile(r, m)
	if got := e.get(m); got.Status.FailureReason != infrav1.MachineTemplateNotFoundReason {
		t.Fatalf("failureReason = %q, want %s", got.Status.FailureReason, infrav1.MachineTemplateNotFoundReason)
	}
	e.update(m, func(m *testv1.TestMachine) { m.Spec.Image.Ref = "ubuntu-tpl" })
	e.mustReconcile(r, m)
	got := e.get(m)
	if got.Status.FailureReason != "" || got.Status.FailureMessage != "" {
		t.Errorf("failure = %q: %q after the fix, want none", got.Status.FailureReason, got.Status.FailureMessage)
	}
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
}

func TestADeletedMachineWhoseVMWasNeverMadeHasItsLeftoversRemoved(t *testing.T) {
	e := newEnv(t)
	var deletes []bool // obs.Exists of each Delete call
	leftovers := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{
			// A Create that crashed before it made the VM: Observe finds nothing.
			DeleteFn: func(_ context.Context, _ *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
				deletes = append(deletes, obs.Exists)
				return providersdk.DeleteResult{}, nil
			},
		}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, leftovers, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web", func(m *testv1.TestMachine) { m.Finalizers = []string{provider.Finalizer} })
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if diff := cmp.Diff([]bool{false}, deletes); diff != "" {
		t.Errorf("Delete calls, by what Observe said (-want +got):\n%s", diff)
	}
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there with finalizers %v", got.Finalizers)
	}
}

func TestAPermanentErrorForgetsTheRecordedTask(t *testing.T) {
	e := newEnv(t)
	// The clone a machine waited for failed for good: its VM's name is another's.
	refused := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
			if m.Task.InFlight() {
				return providersdk.Observation{}, providersdk.Permanent(infrav1.MachineNameConflictReason, "the name is taken")
			}
			return providersdk.Observation{}, nil
		}, CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
			return providersdk.CreateResult{Task: providersdk.Task{Ref: "task-1", Operation: providersdk.OperationClone}}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, refused, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	if got := e.get(m); got.Status.Task == nil {
		t.Fatal("the clone's task was not recorded")
	}
	e.mustReconcile(r, m)
	got := e.get(m)
	if got.Status.Task != nil {
		t.Errorf("status.task = %+v after a permanent failure, want none: a deletion would wait for it", got.Status.Task)
	}
	if got.Status.FailureReason != infrav1.MachineNameConflictReason {
		t.Errorf("failureReason = %q, want %s", got.Status.FailureReason, infrav1.MachineNameConflictReason)
	}
}

func TestAnInFlightCloneIsReportedAndPolled(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"} })
	d := provider.NewDriver()
	r := provider.NewReconciler(k8s, d)
	m := e.machine("slow")
	if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
		t.Error("an in-flight clone was not requeued")
	}
	got := e.get(m)
	if diff := cmp.Diff(ready{"False", "Cloning", "clone in progress"}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if got.Status.Task == nil || got.Status.Task.Operation != providersdk.OperationClone {
		t.Errorf("status.task = %+v, want a clone", got.Status.Task)
	}
	// The Provider stops holding: the edit reconnects and the clone is done.
	p := e.provider.DeepCopy()
	p.Spec.Parameters = nil
	if err := k8s.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
		t.Errorf("requeue after %v once ready, want none", res.RequeueAfter)
	}
	got = e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if got.Status.Task != nil {
		t.Errorf("status.task = %+v after the clone, want none", got.Status.Task)
	}
	if d.Creates() != 1 {
		t.Errorf("backend creates = %d, want 1", d.Creates())
	}
}

func TestDeleteRemovesTheVMAndThenTheFinalizer(t *testing.T) {
	e := newEnv(t)
	d := provider.NewDriver()
	r := provider.NewReconciler(k8s, d)
	m := e.machine("web", func(m *testv1.TestMachine) { m.Annotations = map[string]string{testv1.HoldDeletionAnnotation: ""} })
	e.mustReconcile(r, m)
	if _, ok := d.VM(e.get(m).UID); !ok {
		t.Fatal("no backend VM after the first reconcile")
	}
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	// While the backend holds the deletion, the machine and its finalizer stay.
	if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
		t.Error("a held deletion was not requeued")
	}
	held := e.get(m)
	if held == nil || len(held.Finalizers) == 0 {
		t.Fatal("the machine was released while its deletion was held")
	}
	if diff := cmp.Diff(ready{"False", infrav1.MachineDeletingReason, "delete in progress"}, readyOf(held)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	delete(held.Annotations, testv1.HoldDeletionAnnotation)
	if err := k8s.Update(e.ctx, held); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if _, ok := d.VM(held.UID); ok {
		t.Error("the backend VM is still there")
	}
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there with finalizers %v", got.Finalizers)
	}
}

func TestAPausedMachineOrProviderIsLeftAloneAndSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		machine func(*testv1.TestMachine)
		prov    func(*banlieuev1.Provider)
		unpause func(e *env, m *testv1.TestMachine)
		why     func(ns string) string
	}{
		{"machine carries the Cluster API paused annotation", func(m *testv1.TestMachine) {
			m.Annotations = map[string]string{providersdk.PausedAnnotation: ""}
		}, func(*banlieuev1.Provider) {}, func(e *env, m *testv1.TestMachine) {
			e.update(m, func(m *testv1.TestMachine) { delete(m.Annotations, providersdk.PausedAnnotation) })
		}, func(string) string { return "the machine carries the annotation cluster.x-k8s.io/paused" }},
		{"machine belongs to a paused VirtualMachine", func(m *testv1.TestMachine) {
			m.Annotations = map[string]string{infrav1.PausedAnnotation: "the VirtualMachine's spec.paused is true"}
		}, func(*banlieuev1.Provider) {}, func(e *env, m *testv1.TestMachine) {
			e.update(m, func(m *testv1.TestMachine) { delete(m.Annotations, infrav1.PausedAnnotation) })
		}, func(string) string { return "its VirtualMachine is paused (spec.paused)" }},
		{"Provider is paused", func(*testv1.TestMachine) {}, func(p *banlieuev1.Provider) { p.Spec.Paused = true }, func(e *env, _ *testv1.TestMachine) {
			p := e.getProvider()
			p.Spec.Paused = false
			if err := k8s.Update(e.ctx, p); err != nil {
				e.t.Fatal(err)
			}
		}, func(ns string) string { return "Provider " + ns + "/p1 is paused (spec.paused)" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.prov)
			d := provider.NewDriver()
			r := provider.NewReconciler(k8s, d)
			m := e.machine("web", tc.machine)
			if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
				t.Errorf("a paused machine was requeued after %v", res.RequeueAfter)
			}
			got := e.get(m)
			if d.Creates() != 0 || got.Spec.ProviderID != "" {
				t.Errorf("a paused machine was acted on: creates %d, providerID %q", d.Creates(), got.Spec.ProviderID)
			}
			want := []condition{{infrav1.MachinePausedCondition, "True", infrav1.MachinePausedReason, tc.why(e.ns)}}
			if diff := cmp.Diff(want, conditionsOfMachine(got)); diff != "" {
				t.Errorf("a paused machine's conditions (-want +got):\n%s", diff)
			}

			tc.unpause(e, got)
			e.mustReconcile(r, m)
			got = e.get(m)
			want = []condition{
				{infrav1.MachinePausedCondition, "False", infrav1.MachineNotPausedReason, ""},
				{banlieuev1.ReadyCondition, "True", infrav1.MachineProvisionedReason, ""},
			}
			if diff := cmp.Diff(want, conditionsOfMachine(got)); diff != "" {
				t.Errorf("the unpaused machine's conditions (-want +got):\n%s", diff)
			}
		})
	}
}

// condition is a machine's condition, reduced to what the tests compare.
type condition struct{ Type, Status, Reason, Message string }

// conditionsOfMachine lists the machine's conditions, sorted by type.
func conditionsOfMachine(m *testv1.TestMachine) []condition {
	out := make([]condition, 0, len(m.Status.Conditions))
	for _, c := range m.Status.Conditions {
		out = append(out, condition{c.Type, string(c.Status), c.Reason, c.Message})
	}
	slices.SortFunc(out, func(a, b condition) int { return strings.Compare(a.Type, b.Type) })
	return out
}

func TestARotatedSecretIsPickedUpByTheProviderCheckNotByEveryMachineReconcile(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) {
		p.Spec.Connection.CredentialsRef = &banlieuev1.LocalObjectReference{Name: "creds"}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "creds"}, Data: map[string][]byte{"password": []byte("one")}}
	e.create(secret)
	var seen []string
	backend := provider.NewDriver()
	recording := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		seen = append(seen, string(info.Credentials["password"]))
		return backend.Connect(ctx, info)
	})
	sessions := providersdk.NewSessions(recording, k8s)
	r := providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind("TestMachine"), recording, providersdk.WithSessions(sessions))
	m := e.machine("web")
	e.mustReconcile(r, m)
	e.mustReconcile(r, m)
	secret.Data["password"] = []byte("two")
	if err := k8s.Update(e.ctx, secret); err != nil {
		t.Fatal(err)
	}
	// Machine reconciles keep the open session: reading the Secret on each would cost
	// the API server a GET per machine event.
	e.mustReconcile(r, m)
	if diff := cmp.Diff([]string{"one"}, seen); diff != "" {
		t.Errorf("credentials connected with before the Provider check (-want +got):\n%s", diff)
	}
	// The Provider controller's periodic check reads the Secret and reconnects; machines
	// then use the new session.
	e.reconcileProvider(providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK, sessions, time.Minute, providersdk.WithMachineReader(machineCache)))
	e.mustReconcile(r, m)
	if diff := cmp.Diff([]string{"one", "two"}, seen); diff != "" {
		t.Errorf("credentials connected with (-want +got):\n%s", diff)
	}
}

func TestCredentialsTheBackendRejectsAreReadAgainAtOnce(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) {
		p.Spec.Connection.CredentialsRef = &banlieuev1.LocalObjectReference{Name: "creds"}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "creds"}, Data: map[string][]byte{"password": []byte("old")}}
	e.create(secret)
	backend := provider.NewDriver()
	var seen []string
	// The backend accepts only "new": a session opened with "old" is rejected on use.
	rejecting := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		password := string(info.Credentials["password"])
		seen = append(seen, password)
		if password != "new" {
			return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
				return providersdk.Observation{}, providersdk.Unauthorized(errors.New("password rejected"))
			}}, nil
		}
		return backend.Connect(ctx, info)
	})
	r := providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind("TestMachine"), rejecting, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	if got := readyOf(e.get(m)); got.Reason != infrav1.MachineCredentialsRejectedReason {
		t.Fatalf("Ready = %+v, want reason %s", got, infrav1.MachineCredentialsRejectedReason)
	}
	secret.Data["password"] = []byte("new")
	if err := k8s.Update(e.ctx, secret); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if diff := cmp.Diff([]string{"old", "new"}, seen); diff != "" {
		t.Errorf("credentials connected with (-want +got):\n%s", diff)
	}
	if got := readyOf(e.get(m)); got.Reason == infrav1.MachineCredentialsRejectedReason {
		t.Errorf("Ready still says %s after the Secret was fixed", got.Reason)
	}
}

func TestAMissingSecretSaysSo(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) {
		p.Spec.Connection.CredentialsRef = &banlieuev1.LocalObjectReference{Name: "absent"}
	})
	r := provider.NewReconciler(k8s, provider.NewDriver())
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
		t.Error("a missing Secret was not retried")
	}
	if got := readyOf(e.get(m)); got.Status != "False" || got.Reason != infrav1.MachineCredentialsNotFoundReason {
		t.Errorf("Ready = %+v, want False %s", got, infrav1.MachineCredentialsNotFoundReason)
	}
}

func TestARunningVMWithoutAnAddressIsLookedAtAgainForAWhile(t *testing.T) {
	e := newEnv(t)
	waiting := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
			return providersdk.Observation{Exists: true, UpToDate: true, PowerState: banlieuev1.PowerStatePoweredOn, WaitingForGuest: true}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, waiting, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithGuestBackoff(time.Second, 4*time.Second, 3))
	m := e.machine("web")
	var afters []time.Duration
	for range 4 {
		afters = append(afters, e.mustReconcile(r, m).RequeueAfter)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 0}, afters); diff != "" {
		t.Errorf("requeue intervals (-want +got):\n%s", diff)
	}
	// Ready does not wait for an address: a guest with no OS never reports one.
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
}

func TestABackendThatHangsIsReportedUnreachable(t *testing.T) {
	e := newEnv(t)
	hanging := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(ctx context.Context, _ *providersdk.Machine) (providersdk.Observation, error) {
			<-ctx.Done()
			return providersdk.Observation{}, ctx.Err()
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, hanging, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithCallTimeout(100*time.Millisecond))
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter <= 0 {
		t.Errorf("requeue after %v, want a backoff", res.RequeueAfter)
	}
	want := ready{"False", infrav1.MachineBackendUnreachableReason, "backend unreachable: the backend did not answer within 100ms"}
	if diff := cmp.Diff(want, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
}

func TestDeletionWaitsForACreateInFlightBeforeTrustingNotFound(t *testing.T) {
	e := newEnv(t)
	cloning := true
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
			if cloning {
				// The clone has not made the VM visible yet.
				return providersdk.Observation{Task: providersdk.Task{Ref: "task-1", Operation: providersdk.OperationClone}}, nil
			}
			return providersdk.Observation{}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if got := e.get(m); got == nil {
		t.Fatal("the machine was released while its clone was in flight: its VM would be orphaned")
	}
	cloning = false
	e.mustReconcile(r, m)
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there after its VM was gone: finalizers %v", got.Finalizers)
	}
}

func TestAWaitWithoutATaskReferenceKeepsTheRecordedTask(t *testing.T) {
	e := newEnv(t)
	calls := 0
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
			calls++
			if calls == 1 {
				return providersdk.CreateResult{Task: providersdk.Task{Ref: "UPID:pve1:1", Operation: providersdk.OperationClone}}, nil
			}
			// A later reconcile finds the clone busy but not which task it is.
			return providersdk.CreateResult{}, providersdk.InFlight(providersdk.OperationClone, "")
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	e.mustReconcile(r, m)
	got := e.get(m)
	if got.Status.Task == nil || got.Status.Task.Ref != "UPID:pve1:1" {
		t.Errorf("status.task = %+v, want the clone's task UPID:pve1:1 kept", got.Status.Task)
	}
}

func TestAFailedTaskIsRetriedOnlyAfterItsBackoffUnlessTheSpecChanges(t *testing.T) {
	e := newEnv(t)
	creates := 0
	failed := providersdk.Task{Ref: "task-1", Operation: providersdk.OperationClone}
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{
			ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
				if m.Task.InFlight() {
					return providersdk.Observation{}, providersdk.TaskFailed(m.Task, "storage is full")
				}
				return providersdk.Observation{}, nil
			},
			CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
				creates++
				return providersdk.CreateResult{Task: failed}, nil
			},
		}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithUnreachableBackoff(time.Hour, time.Hour))
	m := e.machine("web")
	e.mustReconcile(r, m) // Create starts the task
	if res := e.mustReconcile(r, m); res.RequeueAfter != time.Hour {
		t.Fatalf("requeue after %v, want the hour of backoff", res.RequeueAfter)
	}
	e.mustReconcile(r, m) // woken by its own status write
	if creates != 1 {
		t.Fatalf("creates = %d, want 1: the failed task was retried before its backoff", creates)
	}
	if diff := cmp.Diff(ready{"False", infrav1.MachineTaskFailedReason, "backend clone task failed: storage is full"}, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}

	got := e.get(m)
	got.Spec.Hardware.CPUs = 4 // the user changes the machine: no more waiting
	if err := k8s.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	if creates != 2 {
		t.Errorf("creates = %d after a spec change, want 2", creates)
	}
}

func TestEachNewTaskIsPolledFromTheShortestInterval(t *testing.T) {
	e := newEnv(t)
	step := 0
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
			step++
			// Two polls of one task, then the next task of a multi-step update.
			return providersdk.Observation{Exists: true, Task: providersdk.Task{Ref: fmt.Sprintf("task-%d", (step+1)/2), Operation: providersdk.OperationUpdate}}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithInFlightBackoff(time.Second, time.Minute))
	m := e.machine("web")
	var afters []time.Duration
	for range 4 {
		afters = append(afters, e.mustReconcile(r, m).RequeueAfter)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, time.Second, 2 * time.Second}, afters); diff != "" {
		t.Errorf("requeue intervals (-want +got):\n%s", diff)
	}
}

// statusWrites counts the machine status patches a client makes.
type statusWrites struct {
	client.Client
	n *int
}

func (c statusWrites) Status() client.SubResourceWriter {
	return countedStatus{SubResourceWriter: c.Client.Status(), n: c.n}
}

type countedStatus struct {
	client.SubResourceWriter
	n *int
}

func (s countedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	*s.n++
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// stepper is a backend whose VM needs steps Updates to be up to date; step number
// taskAt (if any) starts a task, which the next reconcile finds done. Create makes the
// VM at once, powered off, when created is false.
type stepper struct {
	created          bool
	steps, taskAt    int
	creates, updates int
	taskDone         bool
	failAt           int // the Update that fails permanently, if any
}

func (b *stepper) driver() providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{
			ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
				if !b.created {
					return providersdk.Observation{}, nil
				}
				o := providersdk.Observation{Exists: true, ProviderID: "test://vm", PowerState: banlieuev1.PowerStatePoweredOff}
				if m.Task.InFlight() && !b.taskDone {
					o.Task = m.Task
				}
				if b.updates >= b.steps && (b.taskAt == 0 || b.taskDone) {
					o.UpToDate, o.PowerState = true, banlieuev1.PowerStatePoweredOn
				}
				return o, nil
			},
			CreateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.CreateResult, error) {
				b.creates++
				b.created = true
				return providersdk.CreateResult{}, nil
			},
			UpdateFn: func(context.Context, *providersdk.Machine, providersdk.Observation) (providersdk.UpdateResult, error) {
				b.updates++
				switch b.updates {
				case b.failAt:
					return providersdk.UpdateResult{}, providersdk.Permanent("ShrinkRefused", "disks cannot shrink")
				case b.taskAt:
					return providersdk.UpdateResult{Task: providersdk.Task{Ref: "task-power-on", Operation: providersdk.OperationUpdate}}, nil
				}
				return providersdk.UpdateResult{}, nil
			},
		}, nil
	})
}

func TestSynchronousStepsAreTakenInOneReconcile(t *testing.T) {
	e := newEnv(t)
	writes := 0
	// Two synchronous steps (a config change, a disk resize), then a power-on task.
	b := &stepper{created: true, steps: 3, taskAt: 3}
	r := providersdk.NewReconciler(statusWrites{Client: k8s, n: &writes}, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")

	if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
		t.Error("the power-on task in flight was not requeued")
	}
	got := e.get(m)
	if got.Status.Task == nil || got.Status.Task.Ref != "task-power-on" {
		t.Errorf("status.task = %+v after the first reconcile, want task-power-on", got.Status.Task)
	}
	if diff := cmp.Diff(ready{"False", infrav1.MachineUpdatingReason, "update in progress"}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if b.updates != 3 || writes != 1 {
		t.Errorf("after one reconcile: %d updates and %d status writes, want 3 and 1", b.updates, writes)
	}

	b.taskDone = true
	if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
		t.Errorf("requeue after %v once up to date, want none", res.RequeueAfter)
	}
	got = e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	// One step per reconcile took four reconciles, each requeued, and three status writes.
	if b.updates != 3 || writes != 2 || got.Status.Task != nil {
		t.Errorf("after two reconciles: %d updates, %d status writes, task %+v; want 3, 2 and none", b.updates, writes, got.Status.Task)
	}
}

func TestASynchronousCreateIsFollowedByTheUpdatesInTheSameReconcile(t *testing.T) {
	e := newEnv(t)
	writes := 0
	b := &stepper{steps: 1} // made powered off; one synchronous Update powers it on
	r := providersdk.NewReconciler(statusWrites{Client: k8s, n: &writes}, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
		t.Errorf("requeue after %v, want none", res.RequeueAfter)
	}
	got := e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if b.creates != 1 || b.updates != 1 || writes != 1 || got.Spec.ProviderID != "test://vm" {
		t.Errorf("%d creates, %d updates, %d status writes, providerID %q; want 1, 1, 1, test://vm", b.creates, b.updates, writes, got.Spec.ProviderID)
	}
}

func TestSynchronousStepsAreBoundedPerReconcile(t *testing.T) {
	e := newEnv(t)
	writes := 0
	b := &stepper{created: true, steps: 1000} // an Update that never brings the VM up to date
	r := providersdk.NewReconciler(statusWrites{Client: k8s, n: &writes}, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
		t.Error("a VM still out of date was not requeued")
	}
	if diff := cmp.Diff(ready{"False", infrav1.MachineUpdatingReason, "update in progress"}, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if b.updates != 4 || writes != 1 {
		t.Errorf("%d updates and %d status writes in one reconcile, want 4 and 1", b.updates, writes)
	}
}

func TestAPermanentErrorStopsTheSynchronousSteps(t *testing.T) {
	e := newEnv(t)
	b := &stepper{created: true, steps: 3, failAt: 2}
	r := providersdk.NewReconciler(k8s, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	if res := e.mustReconcile(r, m); res.RequeueAfter != 0 {
		t.Errorf("requeue after %v after a permanent error, want none", res.RequeueAfter)
	}
	if diff := cmp.Diff(ready{"False", "ShrinkRefused", "disks cannot shrink"}, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if b.updates != 2 {
		t.Errorf("%d updates, want 2: the steps went on after a permanent error", b.updates)
	}
}

func TestAMachineWakesItsProviderOnlyWhileTheProviderSaysOtherwise(t *testing.T) {
	unreachable := providersdk.Unreachable(errors.New("connection refused"))
	unauthorized := providersdk.Unauthorized(errors.New("password rejected"))
	tests := []struct {
		name      string
		fault     error
		condition string
		status    metav1.ConditionStatus
		want      int
	}{
		{"unreachable while the Provider says reachable: one wake for all machines", unreachable, banlieuev1.ProviderBackendReachableCondition, metav1.ConditionTrue, 1},
		{"unreachable once the Provider says so: none", unreachable, banlieuev1.ProviderBackendReachableCondition, metav1.ConditionFalse, 0},
		{"rejected while the Provider says the credentials are valid: one wake for all machines", unauthorized, banlieuev1.ProviderCredentialsValidCondition, metav1.ConditionTrue, 1},
		{"rejected once the Provider says so: none", unauthorized, banlieuev1.ProviderCredentialsValidCondition, metav1.ConditionFalse, 0},
		{"unreachable while the Provider says only the credentials are valid: none", unreachable, banlieuev1.ProviderCredentialsValidCondition, metav1.ConditionTrue, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			p := e.getProvider()
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: tt.condition, Status: tt.status, Reason: "Test"})
			if err := k8s.Status().Update(e.ctx, p); err != nil {
				t.Fatal(err)
			}
			failing := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
				return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
					return providersdk.Observation{}, tt.fault
				}}, nil
			})
			checks := make(chan event.GenericEvent, 10)
			r := providersdk.NewReconciler(k8s, testMachineGVK, failing, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithProviderWakeups(checks))
			for i := range 3 {
				m := e.machine(fmt.Sprintf("vm-%d", i))
				e.mustReconcile(r, m)
				e.mustReconcile(r, m)
			}
			if got := len(checks); got != tt.want {
				t.Errorf("%d wakes of the Provider, want %d", got, tt.want)
			}
			if tt.want > 0 {
				if ev := <-checks; ev.Object.GetName() != e.provider.Name {
					t.Errorf("woke %s, want the Provider %s", ev.Object.GetName(), e.provider.Name)
				}
			}
		})
	}
}
