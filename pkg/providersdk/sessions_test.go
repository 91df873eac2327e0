package providersdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

func TestARotatedSecretIsPickedUpByTheProviderCheckNotByEveryMachineReconcile(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) {
		p.Spec.Connection.CredentialsRef = banlieuev1.LocalObjectReference{Name: "creds"}
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
		p.Spec.Connection.CredentialsRef = banlieuev1.LocalObjectReference{Name: "creds"}
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
		p.Spec.Connection.CredentialsRef = banlieuev1.LocalObjectReference{Name: "absent"}
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
