package providersdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// restartOutcome is what a restart left: the backend VM's starts and power-offs, and
// the machine's status.restart.
type restartOutcome struct {
	Starts, PowerOffs int
	BootID            string
	Result            banlieuev1.RestartResult
	Completed         bool
}

func outcomeOf(t *testing.T, d *provider.Driver, m *testv1.TestMachine) restartOutcome {
	t.Helper()
	vm, _ := d.VM(m.UID)
	o := restartOutcome{Starts: vm.Starts, PowerOffs: vm.PowerOffs}
	r := m.Status.Restart
	o.BootID, o.Result, o.Completed = r.BootID, r.Result, r.CompletedAt != nil
	return o
}

// requestRestart sets the machine's spec.restartRequestedAt to a new time, as core does.
func requestRestart(e *env, m *testv1.TestMachine, at time.Time) {
	e.t.Helper()
	e.update(m, func(m *testv1.TestMachine) {
		m.Spec.RestartRequestedAt = &metav1.Time{Time: at.UTC().Truncate(time.Second)}
	})
}

func TestARestartRequestPowerCyclesTheVMOnce(t *testing.T) {
	e := newEnv(t)
	d := provider.NewDriver()
	m := e.machine("web")
	e.mustReconcile(provider.NewReconciler(k8s, d), m)
	requestRestart(e, m, time.Now())

	e.mustReconcile(provider.NewReconciler(k8s, d), m)
	got := e.get(m)
	want := restartOutcome{Starts: 2, PowerOffs: 1, BootID: "boot-1", Result: banlieuev1.RestartResultRestarted, Completed: true}
	if diff := cmp.Diff(want, outcomeOf(t, d, got)); diff != "" {
		t.Errorf("after the restart (-want +got):\n%s", diff)
	}
	if !got.Status.Restart.RequestedAt.Equal(got.Spec.RestartRequestedAt) || got.Status.Restart.StartedAt == nil {
		t.Errorf("status.restart = %+v, want requestedAt %v and a startedAt", got.Status.Restart, got.Spec.RestartRequestedAt)
	}

	// The request is honoured: more reconciles write nothing and touch nothing.
	e.mustReconcile(provider.NewReconciler(k8s, d), m)
	if again := e.get(m); again.ResourceVersion != got.ResourceVersion {
		t.Errorf("an idle reconcile wrote the machine (resourceVersion %s -> %s)", got.ResourceVersion, again.ResourceVersion)
	}
	if diff := cmp.Diff(want, outcomeOf(t, d, e.get(m))); diff != "" {
		t.Errorf("after another reconcile (-want +got):\n%s", diff)
	}

	// A new request restarts it once more.
	requestRestart(e, m, time.Now().Add(time.Minute))
	e.mustReconcile(provider.NewReconciler(k8s, d), m)
	want = restartOutcome{Starts: 3, PowerOffs: 2, BootID: "boot-2", Result: banlieuev1.RestartResultRestarted, Completed: true}
	if diff := cmp.Diff(want, outcomeOf(t, d, e.get(m))); diff != "" {
		t.Errorf("after a second request (-want +got):\n%s", diff)
	}
}

// crashingDriver is backend's driver whose process is killed at its Update number
// killAt (counted over all sessions): before the backend acts, or after it did but
// before the reconcile could write anything more.
func crashingDriver(backend *provider.Driver, killAt int, afterAction bool) providersdk.Driver {
	updates := 0
	return providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		cl, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: cl.Observe,
			CreateFn:  cl.Create,
			DeleteFn:  cl.Delete,
			UpdateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
				updates++
				if updates == killAt && !afterAction {
					return providersdk.UpdateResult{}, errors.New("process killed")
				}
				res, err := cl.Update(ctx, m, obs)
				if updates == killAt {
					return providersdk.UpdateResult{}, errors.New("process killed")
				}
				return res, err
			},
		}, nil
	})
}

func TestARestartInterruptedAtAnyStepPowerCyclesTheVMOnce(t *testing.T) {
	for _, tc := range []struct {
		name        string
		killAt      int
		afterAction bool
	}{
		{"killed after recording the request, before the power-off", 1, false},
		{"killed right after the power-off", 1, true},
		{"killed before the power-on", 2, false},
		{"killed right after the power-on, before recording Restarted", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			backend := provider.NewDriver()
			m := e.machine("web")
			e.mustReconcile(provider.NewReconciler(k8s, backend), m)
			requestRestart(e, m, time.Now())

			crashing := providersdk.NewReconciler(k8s, testMachineGVK, crashingDriver(backend, tc.killAt, tc.afterAction), providersdk.WithFinalizer(provider.Finalizer))
			if _, err := e.reconcile(crashing, m); err == nil {
				t.Fatal("the crashing reconcile succeeded")
			}
			if r := e.get(m).Status.Restart; r.BootID != "boot-1" || r.Result != "" {
				t.Fatalf("status.restart after the crash = %+v, want the request recorded with boot-1 and no result", r)
			}
			// Its successors, each a new process, finish the restart.
			for range 3 {
				e.mustReconcile(provider.NewReconciler(k8s, backend), m)
			}
			want := restartOutcome{Starts: 2, PowerOffs: 1, BootID: "boot-1", Result: banlieuev1.RestartResultRestarted, Completed: true}
			if diff := cmp.Diff(want, outcomeOf(t, backend, e.get(m))); diff != "" {
				t.Errorf("after the successors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestARestartRequestThatNeedsNoRestartIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name       string
		power      banlieuev1.PowerState
		atCreation bool // the machine is made with the request
		want       restartOutcome
	}{
		{
			name: "a request the machine carries when its VM is made", power: banlieuev1.PowerStatePoweredOn, atCreation: true,
			want: restartOutcome{Starts: 1, Result: banlieuev1.RestartResultSkipped, Completed: true},
		},
		{
			name: "a request for a VM whose desired power is PoweredOff", power: banlieuev1.PowerStatePoweredOff,
			want: restartOutcome{Result: banlieuev1.RestartResultSkipped, Completed: true},
		},
		{
			name: "a request for a suspended VM", power: banlieuev1.PowerStateSuspended,
			want: restartOutcome{Starts: 1, PowerOffs: 1, Result: banlieuev1.RestartResultSkipped, Completed: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			d := provider.NewDriver()
			at := time.Now()
			m := e.machine("web", func(m *testv1.TestMachine) {
				if tc.atCreation {
					m.Spec.RestartRequestedAt = &metav1.Time{Time: at.UTC().Truncate(time.Second)}
				}
			})
			if tc.power == banlieuev1.PowerStateSuspended {
				// Made running, then suspended.
				e.mustReconcile(provider.NewReconciler(k8s, d), m)
			}
			e.update(m, func(m *testv1.TestMachine) { m.Spec.PowerState = tc.power })
			e.mustReconcile(provider.NewReconciler(k8s, d), m)
			if !tc.atCreation {
				requestRestart(e, m, at)
				e.mustReconcile(provider.NewReconciler(k8s, d), m)
			}
			e.mustReconcile(provider.NewReconciler(k8s, d), m)
			if diff := cmp.Diff(tc.want, outcomeOf(t, d, e.get(m))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestARestartOfAVMWithoutBootIDIsUnsupportedAndLeavesItAlone(t *testing.T) {
	e := newEnv(t)
	backend := provider.NewDriver()
	noBootID := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		cl, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: func(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
				obs, err := cl.Observe(ctx, m)
				obs.BootID = ""
				return obs, err
			},
			CreateFn: cl.Create, UpdateFn: cl.Update, DeleteFn: cl.Delete,
		}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, noBootID, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web")
	e.mustReconcile(r, m)
	requestRestart(e, m, time.Now())
	for range 3 {
		e.mustReconcile(r, m)
	}
	want := restartOutcome{Starts: 1, Result: banlieuev1.RestartResultUnsupported, Completed: true}
	if diff := cmp.Diff(want, outcomeOf(t, backend, e.get(m))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
