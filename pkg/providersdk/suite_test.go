package providersdk_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/pkg/providersdk"

	"github.com/banlieue/banlieue/test/testenv"
)

// k8s is a direct (uncached) client to the suite's API server; nil when the suite is skipped.
var k8s client.Client

// suite is the suite's control plane, for the tests that run a manager; nil when skipped.
var suite *testenv.Env

// machineCache is a started cache of TestMachines with the SDK's MachineProviderField
// index, the reader a ProviderReconciler lists a Provider's machines from; nil when
// skipped. env.awaitCache waits until it has caught up with a test's writes.
var machineCache cache.Cache

// TestMain starts one real kube-apiserver and etcd (envtest) with banlieue's CRDs, the
// test provider's and stand-ins for Cluster API's Cluster and Machine (testdata/crd:
// the SDK reads them as unstructured, so their schemas keep every field). The tests drive the SDK's Reconciler by calling Reconcile, so
// every step is deterministic. Without KUBEBUILDER_ASSETS the envtest tests skip (and
// CI fails); the unit tests of the package run either way.
func TestMain(m *testing.M) {
	if !testenv.Available("the provider SDK's envtest tests") {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start("config/crd/bases", "test/provider/config/crd", "pkg/providersdk/testdata/crd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s, suite = env.Client, env
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if machineCache, err = cache.New(env.Config, cache.Options{Scheme: env.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := providersdk.IndexMachines(ctx, machineCache, testMachineGVK); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = machineCache.Start(ctx) }()
	return m.Run()
}
