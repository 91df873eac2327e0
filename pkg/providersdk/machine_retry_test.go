package providersdk_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
)

func TestARunningVMWithoutAnAddressIsLookedAtAgainForAWhile(t *testing.T) {
	e := newEnv(t)
	waiting := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
			return providersdk.Observation{Exists: true, UpToDate: true, PowerState: banlieuev1.PowerStatePoweredOn, WaitingForGuest: true}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, waiting, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithGuestBackoff(time.Second, 4*time.Second, 3))
	m := e.machine("web")
	afters := make([]time.Duration, 0, 4)
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
	if !got.Status.Task.IsDefined() || got.Status.Task.Ref != "UPID:pve1:1" {
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
		return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
			step++
			// Two polls of one task, then the next task of a multi-step update.
			return providersdk.Observation{Exists: true, Task: providersdk.Task{Ref: fmt.Sprintf("task-%d", (step+1)/2), Operation: providersdk.OperationUpdate}}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer), providersdk.WithInFlightBackoff(time.Second, time.Minute))
	m := e.machine("web")
	afters := make([]time.Duration, 0, 4)
	for range 4 {
		afters = append(afters, e.mustReconcile(r, m).RequeueAfter)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, time.Second, 2 * time.Second}, afters); diff != "" {
		t.Errorf("requeue intervals (-want +got):\n%s", diff)
	}
}

func TestAReconcileWhoseSessionWasClosedLooksAgainSoonAndKeepsItsConditions(t *testing.T) {
	e := newEnv(t)
	connects, closed := 0, false
	d := providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		connects++
		return providersdk.ClientFns{ObserveFn: func(context.Context, *providersdk.Machine) (providersdk.Observation, error) {
			if closed {
				return providersdk.Observation{}, fmt.Errorf("failed to read VM: %w", providersdk.ErrSessionClosed)
			}
			return providersdk.Observation{Exists: true, UpToDate: true, PowerState: banlieuev1.PowerStatePoweredOn}, nil
		}}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, d, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	before := readyOf(e.get(m))
	// The Provider's session is replaced while a reconcile still holds the old one.
	closed = true
	if res := e.mustReconcile(r, m); res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Second {
		t.Errorf("requeue after %v, want soon: the Provider's new session is ready", res.RequeueAfter)
	}
	if diff := cmp.Diff(before, readyOf(e.get(m))); diff != "" {
		t.Errorf("Ready changed, though the backend did nothing wrong (-before +after):\n%s", diff)
	}
	closed = false
	e.mustReconcile(r, m)
	if connects != 1 {
		t.Errorf("%d connects, want 1: a closed session is no reason to drop the Provider's current one", connects)
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
		{"the session closed under the reconcile: none, the backend did nothing wrong", fmt.Errorf("failed to read VM: %w", providersdk.ErrSessionClosed), banlieuev1.ProviderCredentialsValidCondition, metav1.ConditionTrue, 0},
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
