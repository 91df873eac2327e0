// Package e2e drives banlieue end to end: a real kube-apiserver and etcd (envtest), the
// core controller, and provider controllers against their backends' simulators, with
// VirtualMachines created the way a user creates them.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/pkg/intern"
	"github.com/banlieue/banlieue/test/testenv"
)

var (
	// cfg is an admin config for the suite's API server.
	cfg *rest.Config
	// k8s is a direct (uncached) client to it, for the tests themselves.
	k8s client.Client
)

// TestMain starts one real kube-apiserver and etcd with banlieue's CRDs and runs the core
// controller for the whole suite. Each test starts the provider controllers it needs,
// against simulators of its own, so that it can stop and restart them.
func TestMain(m *testing.M) {
	if !testenv.Available("the end-to-end suite") {
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := env.InstallAdmission(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, k8s = env.Config, env.Client
	// The cache a core process has (internal/cli).
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultTransform: intern.Transform()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := (&virtualmachine.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 8}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "core manager:", err)
	}
	return code
}
