package providersdk_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// marks is a backend whose VMs carry their machine's mark until they are released.
type marks struct {
	mu sync.Mutex
	// vms are the backend's VMs by the UID of the machine that made them; true while
	// the VM carries that machine's mark.
	vms                 map[types.UID]bool
	releases, deletes   int
	crashAfterRelease   bool
	withoutReleaser     bool
	releasingObserveRan bool
}

func newMarks() *marks { return &marks{vms: map[types.UID]bool{}} }

// releasingClient is a Client that is a Releaser too.
type releasingClient struct {
	providersdk.ClientFns
	providersdk.ReleaserFunc
}

func (b *marks) driver() providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		fns := providersdk.ClientFns{
			ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
				b.mu.Lock()
				defer b.mu.Unlock()
				marked, ok := b.vms[m.UID]
				if m.Releasing() {
					b.releasingObserveRan = true
				}
				if !ok || (!marked && m.Releasing()) {
					return providersdk.Observation{}, nil
				}
				return providersdk.Observation{Exists: true, UpToDate: true, ProviderID: "test://" + string(m.UID), PowerState: banlieuev1.PowerStatePoweredOn}, nil
			},
			CreateFn: func(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.vms[m.UID] = true
				return providersdk.CreateResult{}, nil
			},
			DeleteFn: func(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.deletes++
				delete(b.vms, m.UID)
				return providersdk.DeleteResult{}, nil
			},
		}
		if b.withoutReleaser {
			return fns, nil
		}
		return releasingClient{ClientFns: fns, ReleaserFunc: func(_ context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.ReleaseResult, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if !obs.Exists {
				return providersdk.ReleaseResult{}, errors.New("Release called for a VM Observe did not find")
			}
			b.releases++
			b.vms[m.UID] = false
			if b.crashAfterRelease {
				b.crashAfterRelease = false
				return providersdk.ReleaseResult{}, errors.New("process killed")
			}
			return providersdk.ReleaseResult{}, nil
		}}, nil
	})
}

// vm reports whether the backend has the machine's VM and whether it is marked.
func (b *marks) vm(uid types.UID) (exists, marked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	marked, exists = b.vms[uid]
	return exists, marked
}

// readyMachine makes a machine with the given deletionPolicy, reconciles it until its VM
// exists, and deletes it.
func (e *env) deletedMachine(r *providersdk.Reconciler, name string, policy banlieuev1.DeletionPolicy) *testv1.TestMachine {
	e.t.Helper()
	m := e.machine(name, func(m *testv1.TestMachine) { m.Spec.DeletionPolicy = policy })
	e.mustReconcile(r, m)
	if err := k8s.Delete(e.ctx, m); err != nil {
		e.t.Fatal(err)
	}
	return e.get(m)
}

func TestDeletionPolicy(t *testing.T) {
	for _, tc := range []struct {
		name              string
		policy            banlieuev1.DeletionPolicy
		withoutReleaser   bool
		crashAfterRelease bool
		// wantExists and wantMarked are the backend VM after the deletion.
		wantExists, wantMarked bool
		wantReleases           int
		wantDeletes            int
	}{
		{name: "Retain with a Releaser unmarks the VM, leaves it and lets the machine go", policy: banlieuev1.DeletionPolicyRetain,
			wantExists: true, wantReleases: 1},
		{name: "Retain with a crash between Release and the finalizer's removal completes without deleting the VM", policy: banlieuev1.DeletionPolicyRetain,
			crashAfterRelease: true, wantExists: true, wantReleases: 1},
		{name: "Delete deletes the VM as before, Releaser or not", policy: banlieuev1.DeletionPolicyDelete, wantDeletes: 1},
		{name: "an unset policy deletes the VM", wantDeletes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			b := newMarks()
			b.crashAfterRelease = tc.crashAfterRelease
			r := providersdk.NewReconciler(k8s, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
			m := e.deletedMachine(r, "web", tc.policy)
			uid := m.UID
			if _, err := e.reconcile(r, m); tc.crashAfterRelease {
				if err == nil {
					t.Fatal("the crashing reconcile succeeded")
				}
				if e.get(m) == nil {
					t.Fatal("the machine went with the crash")
				}
				// A new process, with a new session cache, finds the VM unmarked.
				r = providersdk.NewReconciler(k8s, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
				e.mustReconcile(r, m)
			} else if err != nil {
				t.Fatal(err)
			}
			if got := e.get(m); got != nil {
				t.Fatalf("the machine is still there: Ready %+v, finalizers %v", readyOf(got), got.Finalizers)
			}
			exists, marked := b.vm(uid)
			if diff := cmp.Diff([]any{tc.wantExists, tc.wantMarked, tc.wantReleases, tc.wantDeletes}, []any{exists, marked, b.releases, b.deletes}); diff != "" {
				t.Errorf("backend VM exists, marked, releases, deletes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetainWithoutAReleaserKeepsTheVMAndTheMachineUntilTheMachineSaysDelete(t *testing.T) {
	e := newEnv(t)
	b := newMarks()
	b.withoutReleaser = true
	r := providersdk.NewReconciler(k8s, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.deletedMachine(r, "kept", banlieuev1.DeletionPolicyRetain)
	for range 2 {
		if res := e.mustReconcile(r, m); res.RequeueAfter == 0 {
			t.Error("a Retain deletion the provider cannot do was not looked at again")
		}
	}
	got := e.get(m)
	if got == nil || len(got.Finalizers) == 0 {
		t.Fatal("the machine went although its VM cannot be released")
	}
	if r := readyOf(got); r.Status != "False" || r.Reason != infrav1.MachineRetainNotSupportedReason {
		t.Errorf("Ready = %+v, want False, %s", r, infrav1.MachineRetainNotSupportedReason)
	}
	if exists, marked := b.vm(got.UID); !exists || !marked || b.deletes != 0 {
		t.Fatalf("backend VM exists %t, marked %t, deletes %d; want it kept as it was", exists, marked, b.deletes)
	}

	// Delete unblocks it.
	e.update(m, func(m *testv1.TestMachine) { m.Spec.DeletionPolicy = banlieuev1.DeletionPolicyDelete })
	e.mustReconcile(r, m)
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there with deletionPolicy Delete: Ready %+v", readyOf(got))
	}
	if exists, _ := b.vm(got.UID); exists || b.deletes != 1 {
		t.Errorf("backend VM exists %t after %d deletes; want it deleted once", exists, b.deletes)
	}
}

func TestAReleasedMachineWhoseVMIsGoneLetsGoWithoutAnyCall(t *testing.T) {
	e := newEnv(t)
	b := newMarks()
	r := providersdk.NewReconciler(k8s, testMachineGVK, b.driver(), providersdk.WithFinalizer(provider.Finalizer))
	m := e.deletedMachine(r, "gone", banlieuev1.DeletionPolicyRetain)
	b.mu.Lock()
	delete(b.vms, m.UID) // someone deleted the VM on the backend meanwhile
	b.mu.Unlock()
	e.mustReconcile(r, m)
	if got := e.get(m); got != nil {
		t.Errorf("the machine is still there: Ready %+v", readyOf(got))
	}
	if b.releases != 0 || b.deletes != 0 || !b.releasingObserveRan {
		t.Errorf("releases %d, deletes %d, Observe saw Releasing %t; want 0, 0, true", b.releases, b.deletes, b.releasingObserveRan)
	}
}
