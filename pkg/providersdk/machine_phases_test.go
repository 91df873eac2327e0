package providersdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

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
		backendSession, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: backendSession.Observe,
			CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
				if _, err := backendSession.Create(ctx, m, obs); err != nil {
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
	if !got.Status.Task.IsDefined() || got.Status.Task.Operation != providersdk.OperationClone {
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
	if got.Status.Task.IsDefined() {
		t.Errorf("status.task = %+v after the clone, want none", got.Status.Task)
	}
	if d.Creates() != 1 {
		t.Errorf("backend creates = %d, want 1", d.Creates())
	}
}

func TestATaskThatEndsWithinTheRecordDelayIsNeverWritten(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"} })
	d := provider.NewDriver()
	// Made with its provider's finalizer, as core makes machines: the only write a
	// reconcile could make is the status.
	m := e.machine("quick", func(m *testv1.TestMachine) { m.Finalizers = []string{provider.NewReconciler(k8s, d).Finalizer()} })
	for _, tt := range []struct {
		name  string
		delay time.Duration
		// recorded says whether the clone in flight is in the machine's status.
		recorded bool
	}{
		{"a task younger than the delay stays in memory", time.Hour, false},
		{"a task as old as the delay is written", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := provider.NewReconciler(k8s, d, providersdk.WithTaskRecordDelay(tt.delay))
			if tt.delay == 0 {
				r = provider.NewReconciler(k8s, d)
			}
			rv := e.get(m).ResourceVersion
			if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
				t.Error("an in-flight clone was not requeued")
			}
			got := e.get(m)
			if got.Status.Task.IsDefined() != tt.recorded {
				t.Errorf("status.task = %+v, want recorded %v", got.Status.Task, tt.recorded)
			}
			if !tt.recorded && got.ResourceVersion != rv {
				t.Errorf("the machine was written while its task is younger than the delay: %+v", got.Status)
			}
		})
	}
	// The clone ends: one status write says so, from the task kept in memory, and no
	// second clone is made.
	r := provider.NewReconciler(k8s, d, providersdk.WithTaskRecordDelay(time.Hour))
	e.mustReconcile(r, m)
	p := e.provider.DeepCopy()
	p.Spec.Parameters = nil
	if err := k8s.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile(r, m)
	got := e.get(m)
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
	}
	if got.Status.Task.IsDefined() || d.Creates() != 1 {
		t.Errorf("status.task = %+v, backend creates = %d; want none and 1", got.Status.Task, d.Creates())
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

// releasingFns is a ClientFns that is a Releaser too: its Release starts a task as its
// Delete does.
type releasingFns struct{ providersdk.ClientFns }

// Release calls Delete and reports its task as a release.
func (c releasingFns) Release(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.ReleaseResult, error) {
	res, err := c.Delete(ctx, m, obs)
	return providersdk.ReleaseResult{Task: providersdk.Task{Ref: res.Task.Ref, Operation: providersdk.OperationRelease}}, err
}

// A Delete or a Release that runs as a backend task ends in a later reconcile than the
// one that started it. The VM is logged deleted (or released) there, once, as when the
// VM goes within the reconcile that asked.
func TestADeleteOrReleaseTaskIsLoggedOnceItsVMIsGone(t *testing.T) {
	tests := []struct {
		name   string
		policy banlieuev1.DeletionPolicy
		want   string
	}{
		{"a delete", banlieuev1.DeletionPolicyDelete, "Deleted backend VM"},
		{"a release", banlieuev1.DeletionPolicyRetain, "Released backend VM; it is left as it is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			gone := false
			cl := releasingFns{providersdk.ClientFns{
				ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
					if gone {
						return providersdk.Observation{}, nil
					}
					return providersdk.Observation{Exists: true, UpToDate: true, ProviderID: "test://web", PowerState: banlieuev1.PowerStatePoweredOn}, nil
				},
				DeleteFn: func(_ context.Context, _ *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
					if !obs.Exists {
						return providersdk.DeleteResult{}, nil
					}
					return providersdk.DeleteResult{Task: providersdk.Task{Ref: "task-9", Operation: providersdk.OperationDelete}}, nil
				},
			}}
			d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) { return cl, nil })
			r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
			m := e.machine("web", func(m *testv1.TestMachine) { m.Spec.DeletionPolicy = tt.policy })
			var logged []string
			ctx := ctrl.LoggerInto(e.ctx, funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
			reconcile := func() {
				t.Helper()
				if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
					t.Fatalf("reconcile: %v", err)
				}
			}
			reconcile()
			if err := k8s.Delete(e.ctx, m); err != nil {
				t.Fatal(err)
			}
			reconcile() // starts the task
			if task := e.get(m).Status.Task; task.Ref != "task-9" {
				t.Fatalf("status.task = %+v, want the task in flight", task)
			}
			gone = true
			reconcile()
			if got := e.get(m); got != nil {
				t.Fatalf("the machine is still there with finalizers %v", got.Finalizers)
			}
			var n int
			for _, l := range logged {
				if strings.Contains(l, `"msg"="`+tt.want+`"`) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%q logged %d times, want once; the log:\n%s", tt.want, n, strings.Join(logged, "\n"))
			}
		})
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
	if !got.Status.Task.IsDefined() || got.Status.Task.Ref != "task-power-on" {
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
	if b.updates != 3 || writes != 2 || got.Status.Task.IsDefined() {
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

func TestTheDriverIsGivenTheClusterToMarkTheVMWith(t *testing.T) {
	e := newEnv(t)
	ns := &corev1.Namespace{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Name: providersdk.ClusterNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	var got []string
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{
			CreateFn: func(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
				got = append(got, m.ClusterID)
				return providersdk.CreateResult{}, errors.New("stop here")
			},
		}, nil
	})
	m := e.machine("marked")
	_, _ = e.reconcile(providersdk.NewReconciler(k8s, testv1.GroupVersion.WithKind("TestMachine"), d, providersdk.WithFinalizer(provider.Finalizer)), m)
	if diff := cmp.Diff([]string{string(ns.UID)}, got); diff != "" {
		t.Errorf("the Machine's ClusterID given to Create (-want +got):\n%s", diff)
	}
}
