package providersdk_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
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
	e := &env{t: t, ctx: context.Background(), ns: strings.ReplaceAll(providersdk.DNSLabel(fmt.Sprintf("sdk%d-%s", nsSeq.Add(1), t.Name()), "sdk"), ".", "-")}
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
	// The machines' image, as an administrator's VMImage gives it: admission checks it.
	e.create(&banlieuev1.VMImage{
		ObjectMeta: metav1.ObjectMeta{Name: e.imageName()},
		Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
			{ProviderClass: e.provider.Spec.ProviderClassRef.Name, Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-tpl"},
		}},
	})
	return e
}

// imageName is the VMImage the env's machines are made from; the name is the test's
// own, apart from any VMImage a test makes.
func (e *env) imageName() string { return e.ns + "-machines" }

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
			Image:       infrav1.MachineImage{Name: e.imageName(), Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-tpl"},
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

// run runs Setup's controllers for cfg in a manager that caches the env's namespace
// (cfg.Namespace's instead, with cfg.CacheOptions, as 'banlieue provider' does), until
// the test ends.
func (e *env) run(cfg providersdk.Config) {
	e.t.Helper()
	mgr, err := ctrl.NewManager(suite.Config, ctrl.Options{
		Scheme:     suite.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cfg.CacheOptions(cache.Options{DefaultNamespaces: map[string]cache.Config{e.ns: {}}}),
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
