package virtualmachine

import (
	"context"
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/pkg/intern"
	"github.com/banlieue/banlieue/test/provider"
	"github.com/banlieue/banlieue/test/testenv"
)

// k8s is a direct (uncached) client to the suite's API server, for the tests themselves.
var k8s client.Client

// core is the suite's Reconciler, which the manager runs.
var core = &Reconciler{}

// backend is the test provider's backend, which the suite's provider controller serves.
var backend = provider.NewDriver()

// TestMain starts one real kube-apiserver and etcd (envtest) with banlieue's CRDs and
// the test provider's, and runs the core controller and the test provider against it.
func TestMain(m *testing.M) {
	if !testenv.Available("the core controller suite") {
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start("config/crd/bases", "test/provider/config/crd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := env.InstallAdmission(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	k8s = env.Client
	// The cache a core process has (internal/cli).
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultTransform: intern.Transform()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core.Client = mgr.GetClient()
	if err := core.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 4}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := provider.NewReconciler(mgr.GetClient(), backend).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}
