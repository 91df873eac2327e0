package testenv

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/pkg/intern"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// FastMachineOptions are machine reconciler intervals short enough for tests: a task
// in flight, an unreachable backend and a guest without an address are looked at
// again within a second or two, not minutes.
func FastMachineOptions() []providersdk.Option {
	return []providersdk.Option{
		providersdk.WithInFlightBackoff(100*time.Millisecond, time.Second),
		providersdk.WithUnreachableBackoff(200*time.Millisecond, 2*time.Second),
		providersdk.WithGuestBackoff(100*time.Millisecond, time.Second, 1000),
	}
}

// StartProvider runs the provider c against cfg in a manager of its own, as a provider
// process would run, until the test ends or stop is called (once is enough; later
// calls do nothing). A manager that stops with an error fails the test.
func StartProvider(tb testing.TB, cfg *rest.Config, c providersdk.Config) (stop func()) {
	tb.Helper()
	scheme, err := Scheme()
	if err != nil {
		tb.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The cache a provider process has (internal/cli).
		Cache: cache.Options{DefaultTransform: intern.Transform()},
		// Tests start a provider more than once in a process, as a restarted pod would.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := providersdk.Setup(mgr, c); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("provider manager: %v", err)
			}
		}
	}
	tb.Cleanup(stop)
	return stop
}
