package providersdk_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

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
	// The backend refuses more than 8 CPUs for good, until the machine asks for fewer.
	fussy := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		backendSession, err := backend.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return providersdk.ClientFns{
			ObserveFn: backendSession.Observe,
			UpdateFn:  backendSession.Update,
			CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
				if m.Spec.Hardware.CPUs > 8 {
					return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "no host has %d CPUs", m.Spec.Hardware.CPUs)
				}
				return backendSession.Create(ctx, m, obs)
			},
		}, nil
	})
	r := providersdk.NewReconciler(k8s, testMachineGVK, fussy, providersdk.WithFinalizer(provider.Finalizer))
	m := e.machine("web", func(m *testv1.TestMachine) { m.Spec.Hardware.CPUs = 16 })
	e.mustReconcile(r, m)
	if got := e.get(m); got.Status.FailureReason != infrav1.MachinePlacementInvalidReason {
		t.Fatalf("failureReason = %q, want %s", got.Status.FailureReason, infrav1.MachinePlacementInvalidReason)
	}
	e.update(m, func(m *testv1.TestMachine) { m.Spec.Hardware.CPUs = 2 })
	e.mustReconcile(r, m)
	got := e.get(m)
	if got.Status.FailureReason != "" || got.Status.FailureMessage != "" {
		t.Errorf("failure = %q: %q after the fix, want none", got.Status.FailureReason, got.Status.FailureMessage)
	}
	if diff := cmp.Diff(ready{"True", infrav1.MachineProvisionedReason, ""}, readyOf(got)); diff != "" {
		t.Errorf("Ready (-want +got):\n%s", diff)
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
	if got := e.get(m); !got.Status.Task.IsDefined() {
		t.Fatal("the clone's task was not recorded")
	}
	e.mustReconcile(r, m)
	got := e.get(m)
	if got.Status.Task.IsDefined() {
		t.Errorf("status.task = %+v after a permanent failure, want none: a deletion would wait for it", got.Status.Task)
	}
	if got.Status.FailureReason != infrav1.MachineNameConflictReason {
		t.Errorf("failureReason = %q, want %s", got.Status.FailureReason, infrav1.MachineNameConflictReason)
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
		{"Provider is paused", func(*testv1.TestMachine) {}, func(p *banlieuev1.Provider) { p.Spec.Paused = ptr.To(true) }, func(e *env, _ *testv1.TestMachine) {
			p := e.getProvider()
			p.Spec.Paused = ptr.To(false)
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
				{infrav1.MachineRestartRequiredCondition, "False", infrav1.MachineNoPendingChangeReason, ""},
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
