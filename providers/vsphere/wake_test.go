package vsphere

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

// countingDriver is the vSphere Driver whose sessions count their GuestsWithAddresses
// calls.
type countingDriver struct {
	*Driver
	calls atomic.Int64
}

func (d *countingDriver) Connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	cl, err := d.Driver.Connect(ctx, info)
	if err != nil {
		return nil, err
	}
	return &countingSession{Client: cl, calls: &d.calls}, nil
}

type countingSession struct {
	providersdk.Client
	calls *atomic.Int64
}

// Inventory is the session's: the Provider publishes the failure domain the machine is in.
func (s *countingSession) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	return s.Client.(providersdk.InventoryReader).Inventory(ctx)
}

func (s *countingSession) GuestsWithAddresses(ctx context.Context) (map[string]bool, error) {
	s.calls.Add(1)
	return s.Client.(providersdk.GuestAddressReporter).GuestsWithAddresses(ctx)
}

// TestAGuestThatGetsItsAddressLateIsWokenByTheProviderRefresh runs the provider's
// controllers (providersdk.Setup) on an API server against the simulator: once a VM's
// short window of looks is over, the machine costs vCenter nothing until the Provider's
// inventory refresh sees its guest's address and wakes it.
func TestAGuestThatGetsItsAddressLateIsWokenByTheProviderRefresh(t *testing.T) {
	testenv.Assets(t)
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	sim := vspheretest.Start(t)
	const ns = "infra"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		sim.CredentialsSecret(ns, "vc-credentials"),
		providerFor(sim),
		// The machine's image, which admission finds as an administrator's VMImage.
		&banlieuev1.VMImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}, Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
			{ProviderClass: ProviderClass, Kind: banlieuev1.ImageSourceTemplate, Ref: vspheretest.TemplateName},
		}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	driver := &countingDriver{Driver: NewDriver()}
	cfg := Config()
	cfg.Driver = driver
	cfg.InventoryInterval = 300 * time.Millisecond
	cfg.MachineOptions = append(cfg.MachineOptions,
		providersdk.WithInFlightBackoff(100*time.Millisecond, time.Second),
		providersdk.WithGuestWindow(10*time.Millisecond, 20*time.Millisecond, 2),
	)
	if err := providersdk.Setup(mgr, cfg); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	m := &infrav1.VSphereMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: infrav1.VSphereMachineSpec{MachineSpec: infrav1.MachineSpec{
			ProviderRef:   infrav1.ProviderRef{Namespace: ns, Name: "vc"},
			FailureDomain: "dc0-dc0-c0",
			Image:         infrav1.MachineImage{Name: "ubuntu", Kind: banlieuev1.ImageSourceTemplate, Ref: vspheretest.TemplateName},
			Hardware:      infrav1.MachineHardware{CPUs: 2, MemoryMiB: 2048},
			PowerState:    banlieuev1.PowerStatePoweredOn,
		}},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	get := func() *infrav1.VSphereMachine {
		t.Helper()
		got := &infrav1.VSphereMachine{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	waitFor(t, 20*time.Second, "the machine is Ready", func() bool {
		got := get()
		return meta.IsStatusConditionTrue(got.Status.Conditions, banlieuev1.ReadyCondition) && got.Spec.ProviderID != ""
	})

	// Past the window, the VM is not looked at (a look is a FindByUuid and a property
	// read); the Provider refresh reads every guest's address in one call instead.
	time.Sleep(time.Second)
	before, refreshes := backendCalls(), driver.calls.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := callsSince(before)["FindByUuid"]; n != 0 {
		t.Errorf("the VM was looked for %v times in 1.5s after its window", n)
	}
	if n := driver.calls.Load() - refreshes; n < 2 {
		t.Errorf("%d looks at the guests in 1.5s of 300ms refreshes, want at least 2", n)
	}

	if err := sim.SetGuestIP(ctx, get().Status.VSphere.MoRef, "10.0.0.42"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the machine has its guest's address", func() bool {
		a := get().Status.Addresses
		return len(a) == 1 && a[0].Address == "10.0.0.42"
	})

	// With every machine of the Provider addressed, the refresh makes no such call.
	time.Sleep(500 * time.Millisecond)
	before, refreshes = backendCalls(), driver.calls.Load()
	time.Sleep(time.Second)
	if n := driver.calls.Load() - refreshes; n != 0 {
		t.Errorf("%d looks at the guests with every machine addressed, want none", n)
	}
	if n := callsSince(before)["FindByUuid"]; n != 0 {
		t.Errorf("the addressed VM was looked for %v times in a second", n)
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
	}
}
