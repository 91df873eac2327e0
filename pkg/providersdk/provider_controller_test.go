package providersdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

var testMachineGVK = testv1.GroupVersion.WithKind("TestMachine")

// conditionsOf reduces a Provider's conditions to type → "Status/Reason: Message".
func conditionsOf(p *banlieuev1.Provider) map[string]string {
	out := map[string]string{}
	for _, c := range p.Status.Conditions {
		out[c.Type] = string(c.Status) + "/" + c.Reason + ": " + c.Message
	}
	return out
}

func (e *env) getProvider() *banlieuev1.Provider {
	e.t.Helper()
	p := &banlieuev1.Provider{}
	if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(e.provider), p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) reconcileProvider(r *providersdk.ProviderReconciler) ctrl.Result {
	e.t.Helper()
	e.awaitCache()
	res, err := r.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e.provider)})
	if err != nil {
		e.t.Fatalf("reconcile Provider: %v", err)
	}
	return res
}

// backendWith is a Driver whose sessions fail to connect with connectErr, or else run
// the inventory function inv.
func backendWith(connectErr error, inv func(context.Context) (providersdk.Inventory, error)) providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		if connectErr != nil {
			return nil, connectErr
		}
		if inv == nil {
			return providersdk.NopClient{}, nil
		}
		return struct {
			providersdk.NopClient
			providersdk.InventoryFunc
		}{InventoryFunc: inv}, nil
	})
}

func newProviderReconciler(d providersdk.Driver) *providersdk.ProviderReconciler {
	return providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK, providersdk.NewSessions(d, k8s), time.Minute,
		providersdk.WithMachineReader(machineCache))
}

// awaitCache waits until machineCache holds the namespace's TestMachines as the API
// server has them, so a ProviderReconciler reading it sees what the test wrote.
func (e *env) awaitCache() {
	e.t.Helper()
	versions := func(r client.Reader) (map[string]string, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(testv1.GroupVersion.WithKind("TestMachineList"))
		if err := r.List(e.ctx, list, client.InNamespace(e.ns)); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, u := range list.Items {
			out[u.GetName()] = u.GetResourceVersion()
		}
		return out, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, err := versions(k8s)
		if err != nil {
			e.t.Fatal(err)
		}
		cached, err := versions(machineCache)
		if err == nil && cmp.Equal(live, cached) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the machine cache did not catch up: live %v, cached %v (%v)", live, cached, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// missingSecret is what a Provider says of its credentials Secret "creds" that does not
// exist in namespace NS.
const missingSecret = "secret NS/creds named by spec.connection.credentialsRef does not exist; " +
	"create it in the Provider's namespace with the keys the provider's guide lists: credentials Secret not found"

func TestProviderStatusSaysWhatIsWrongWithTheBackend(t *testing.T) {
	domains := []banlieuev1.FailureDomain{{Name: "rack-a", Labels: map[string]string{"rack": "a"}, Attributes: banlieuev1.FailureDomainAttributes{AvailableStorageClasses: []string{"fast"}}}}
	healthy := func(context.Context) (providersdk.Inventory, error) {
		return providersdk.Inventory{FailureDomains: domains}, nil
	}
	tests := []struct {
		name        string
		driver      providersdk.Driver
		credentials bool
		want        map[string]string
		wantDomains []banlieuev1.FailureDomain
	}{{
		name:        "a healthy backend makes the Provider Ready with its failure domains",
		driver:      backendWith(nil, healthy),
		credentials: true,
		want:        map[string]string{"Ready": "True/Ready: ", "BackendReachable": "True/Reachable: ", "CredentialsValid": "True/Valid: "},
		wantDomains: domains,
	}, {
		name:        "an unreachable backend says so and leaves the credentials unchecked",
		driver:      backendWith(providersdk.Unreachable(errors.New("dial tcp 127.0.0.1:1: connection refused")), healthy),
		credentials: true,
		want: map[string]string{
			"Ready":            "False/Unreachable: dial tcp 127.0.0.1:1: connection refused",
			"BackendReachable": "False/Unreachable: dial tcp 127.0.0.1:1: connection refused",
			"CredentialsValid": "False/NotChecked: the backend could not be reached",
		},
	}, {
		name:        "rejected credentials say so",
		driver:      backendWith(providersdk.Unauthorized(errors.New("the backend rejected the username or password")), healthy),
		credentials: true,
		want: map[string]string{
			"Ready":            "False/CredentialsRejected: the backend rejected the username or password",
			"BackendReachable": "True/Reachable: ",
			"CredentialsValid": "False/CredentialsRejected: the backend rejected the username or password",
		},
	}, {
		name:        "malformed credentials say which key is missing",
		driver:      backendWith(providersdk.Permanent("", `credentials Secret has no key "password"`), healthy),
		credentials: true,
		want: map[string]string{
			"Ready":            `False/CredentialsInvalid: credentials Secret has no key "password"`,
			"BackendReachable": "False/NotChecked: the credentials are invalid",
			"CredentialsValid": `False/CredentialsInvalid: credentials Secret has no key "password"`,
		},
	}, {
		name:   "a missing credentials Secret says which",
		driver: backendWith(nil, healthy),
		want: map[string]string{
			"Ready":            "False/CredentialsNotFound: " + missingSecret,
			"BackendReachable": "False/NotChecked: the credentials or CA bundle are missing",
			"CredentialsValid": "False/CredentialsNotFound: " + missingSecret,
		},
	}, {
		name: "an inventory the backend refuses after taking the credentials is no credentials problem",
		driver: backendWith(nil, func(context.Context) (providersdk.Inventory, error) {
			return providersdk.Inventory{}, providersdk.Permanent("PermissionDenied", "the user may not read the datacenter dc1")
		}),
		credentials: true,
		want: map[string]string{
			"Ready":            "False/InventoryFailed: the user may not read the datacenter dc1",
			"BackendReachable": "True/Reachable: ",
			"CredentialsValid": "True/Valid: ",
		},
	}, {
		name: "a failed inventory keeps the backend's other conditions",
		driver: backendWith(nil, func(context.Context) (providersdk.Inventory, error) {
			return providersdk.Inventory{}, errors.New("property collector timed out")
		}),
		credentials: true,
		want:        map[string]string{"Ready": "False/InventoryFailed: property collector timed out"},
	}, {
		name: "a session a machine's reconcile closed under the check says nothing: the next check looks with a new one",
		driver: backendWith(nil, func(context.Context) (providersdk.Inventory, error) {
			return providersdk.Inventory{}, fmt.Errorf("failed to read the inventory: %w", providersdk.ErrSessionClosed)
		}),
		credentials: true,
		want:        map[string]string{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(p *banlieuev1.Provider) {
				p.Spec.Connection.CredentialsRef = banlieuev1.LocalObjectReference{Name: "creds"}
			})
			if tt.credentials {
				e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "creds"}, StringData: map[string]string{"username": "u", "password": "p"}})
			}
			res := e.reconcileProvider(newProviderReconciler(tt.driver))
			got := e.getProvider()
			want := map[string]string{}
			for k, v := range tt.want {
				want[k] = strings.ReplaceAll(v, "NS", e.ns)
			}
			if diff := cmp.Diff(want, conditionsOf(got)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDomains, got.Status.FailureDomains, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("failure domains (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(provider.MachineKind, got.Status.MachineKind); diff != "" {
				t.Errorf("machineKind (-want +got):\n%s", diff)
			}
			if res.RequeueAfter <= 0 {
				t.Error("no requeue: the Provider would never be looked at again")
			}
			if !strings.Contains(strings.Join(got.Finalizers, ","), providersdk.ProviderFinalizer) {
				t.Errorf("finalizers %v lack %s", got.Finalizers, providersdk.ProviderFinalizer)
			}
		})
	}
}

func TestAProviderOfAnotherClassIsLeftAlone(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = "someone-else" })
	e.reconcileProvider(newProviderReconciler(backendWith(nil, nil)))
	got := e.getProvider()
	if len(got.Finalizers) != 0 || got.Status.MachineKind.IsDefined() || len(got.Status.Conditions) != 0 {
		t.Errorf("a Provider of another class was touched: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
}

func TestAProviderIsDeletedOnlyOnceItsMachinesAreGone(t *testing.T) {
	e := newEnv(t)
	r := newProviderReconciler(backendWith(nil, nil))
	e.reconcileProvider(r)
	m := e.machine("web")
	if err := k8s.Delete(e.ctx, e.getProvider()); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	c := meta.FindStatusCondition(e.getProvider().Status.Conditions, banlieuev1.ReadyCondition)
	want := "deletion waits for 1 TestMachine still on this Provider (" + e.ns + "/web); delete or move their VMs"
	if c == nil || c.Reason != banlieuev1.ProviderDeletionBlockedReason || c.Message != want {
		t.Fatalf("Ready = %+v, want reason %s and message %q", c, banlieuev1.ProviderDeletionBlockedReason, want)
	}

	if err := k8s.Delete(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(e.provider), &banlieuev1.Provider{}); err == nil {
		t.Error("the Provider still exists after its last machine went")
	}
}

func TestTheCABundleReachesTheDriverFromWhereverItIsGiven(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	tests := []struct {
		name    string
		bundle  banlieuev1.CABundle
		objects func(ns string) []client.Object
		want    string // the bundle the driver saw, or the Ready condition when it saw none
	}{{
		name:   "inline",
		bundle: banlieuev1.CABundle{Inline: pem},
		want:   pem,
	}, {
		name:   "a ConfigMap key",
		bundle: banlieuev1.CABundle{ConfigMapRef: banlieuev1.KeyReference{Name: "ca", Key: "ca.crt"}},
		objects: func(ns string) []client.Object {
			return []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}, Data: map[string]string{"ca.crt": pem}}}
		},
		want: pem,
	}, {
		name:   "a Secret key",
		bundle: banlieuev1.CABundle{SecretRef: banlieuev1.KeyReference{Name: "ca", Key: "ca.crt"}},
		objects: func(ns string) []client.Object {
			return []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}, StringData: map[string]string{"ca.crt": pem}}}
		},
		want: pem,
	}, {
		name:   "a ConfigMap without the key says which key is missing",
		bundle: banlieuev1.CABundle{ConfigMapRef: banlieuev1.KeyReference{Name: "ca", Key: "ca.crt"}},
		objects: func(ns string) []client.Object {
			return []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"}, Data: map[string]string{"other": pem}}}
		},
		want: `False/CredentialsNotFound: ConfigMap NS/ca has no key "ca.crt": CA bundle not found`,
	}, {
		name:   "a missing Secret says which",
		bundle: banlieuev1.CABundle{SecretRef: banlieuev1.KeyReference{Name: "ca", Key: "ca.crt"}},
		want:   "False/CredentialsNotFound: Secret NS/ca: CA bundle not found",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.Connection.CABundle = &tt.bundle })
			if tt.objects != nil {
				for _, o := range tt.objects(e.ns) {
					e.create(o)
				}
			}
			var seen []byte
			d := providersdk.DriverFunc(func(_ context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
				seen = info.CABundle
				return providersdk.NopClient{}, nil
			})
			e.reconcileProvider(newProviderReconciler(d))
			got := string(seen)
			if seen == nil {
				got = conditionsOf(e.getProvider())["Ready"]
			}
			if diff := cmp.Diff(strings.ReplaceAll(tt.want, "NS", e.ns), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// breakable is a backend whose VMs all exist and are up to date until the test breaks
// it; it records when the Provider controller reads its inventory.
type breakable struct {
	mu     sync.Mutex
	fault  error
	checks []time.Time
	gone   map[string]bool // machines whose VMs were deleted
}

func (b *breakable) set(fault error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fault = fault
}

// checksSince returns the times of the inventory reads from start on.
func (b *breakable) checksSince(start time.Time) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var since []time.Time
	for _, c := range b.checks {
		if !c.Before(start) {
			since = append(since, c)
		}
	}
	return since
}

func (b *breakable) driver() providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return struct {
			providersdk.ClientFns
			providersdk.InventoryFunc
		}{providersdk.ClientFns{ObserveFn: b.observe, DeleteFn: b.delete}, b.inventory}, nil
	})
}

func (b *breakable) observe(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return providersdk.Observation{Exists: !b.gone[m.Name], UpToDate: true, ProviderID: "test://" + m.Name, PowerState: banlieuev1.PowerStatePoweredOn}, b.fault
}

func (b *breakable) delete(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone == nil {
		b.gone = map[string]bool{}
	}
	b.gone[m.Name] = true
	return providersdk.DeleteResult{}, b.fault
}

func (b *breakable) inventory(context.Context) (providersdk.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks = append(b.checks, time.Now())
	return providersdk.Inventory{}, b.fault
}

// wakesClass is the provider class of the next test's Providers, so that no other
// test's controllers claim them.
const wakesClass = "wakes"

func TestAMachineThatMeetsAFaultHasItsProviderCheckedOnceAtOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fault     error
		condition string
		want      string
	}{{
		name:      "an unreachable backend",
		fault:     providersdk.Unreachable(errors.New("dial tcp 127.0.0.1:1: connection refused")),
		condition: banlieuev1.ProviderBackendReachableCondition,
		want:      "False/Unreachable: dial tcp 127.0.0.1:1: connection refused",
	}, {
		name:      "rejected credentials",
		fault:     providersdk.Unauthorized(errors.New("password rejected")),
		condition: banlieuev1.ProviderCredentialsValidCondition,
		want:      "False/CredentialsRejected: password rejected",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = wakesClass })
			b := &breakable{}
			// Neither the Provider's refresh nor the machines' retries come round during the
			// test: only a wake can have the Provider checked, and only the Provider's
			// turning Ready can have the machines retry.
			e.run(providersdk.Config{
				Class: wakesClass, MachineKind: testMachineGVK, Driver: b.driver(), InventoryInterval: time.Hour,
				MachineOptions: []providersdk.Option{providersdk.WithUnreachableBackoff(time.Hour, time.Hour)},
			})
			machines := make([]*testv1.TestMachine, 0, 10)
			for i := range 10 {
				machines = append(machines, e.machine(fmt.Sprintf("vm-%d", i)))
			}
			allReady := func() bool {
				for _, m := range machines {
					if readyOf(e.get(m)).Status != "True" {
						return false
					}
				}
				return true
			}
			eventually(t, "the Provider and its machines are Ready", func() bool {
				return conditionsOf(e.getProvider())["Ready"] == "True/Ready: " && allReady()
			})

			b.set(tt.fault)
			broken := time.Now()
			// Every machine meets the fault: a change wakes each.
			for _, m := range machines {
				patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test/touched":"yes"}}}`))
				if err := k8s.Patch(e.ctx, e.get(m), patch); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "the Provider reports the fault", func() bool {
				return conditionsOf(e.getProvider())[tt.condition] == tt.want
			})
			// The Provider's own retry comes 2 s after a failed check; any other check within
			// a second of the first was a machine's.
			time.Sleep(time.Second)
			if checks := b.checksSince(broken); len(checks) != 1 {
				t.Errorf("the Provider was checked %d times for %d machines meeting the fault, want once", len(checks), len(machines))
			}

			b.set(nil)
			eventually(t, "the machines are Ready again after the Provider", allReady)
		})
	}
}

func TestMachinesGoingAwayLeaveAHealthyProviderAlone(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = wakesClass })
	b := &breakable{}
	e.run(providersdk.Config{Class: wakesClass, MachineKind: testMachineGVK, Driver: b.driver(), InventoryInterval: time.Hour})
	machines := make([]*testv1.TestMachine, 0, 5)
	for i := range 5 {
		machines = append(machines, e.machine(fmt.Sprintf("vm-%d", i)))
	}
	eventually(t, "the Provider and its machines are Ready", func() bool {
		for _, m := range machines {
			if readyOf(e.get(m)).Status != "True" {
				return false
			}
		}
		return conditionsOf(e.getProvider())["Ready"] == "True/Ready: "
	})

	start := time.Now()
	for _, m := range machines {
		if err := k8s.Delete(e.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the machines are gone", func() bool {
		for _, m := range machines {
			if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(m), &testv1.TestMachine{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	// A machine's removal matters only to a Provider being deleted; a healthy one
	// would read its whole inventory again for every VM of a mass deletion.
	if checks := b.checksSince(start); len(checks) != 0 {
		t.Errorf("the Provider read its inventory %d times while its %d machines went, want none", len(checks), len(machines))
	}
}
