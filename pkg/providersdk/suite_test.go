package providersdk_test

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/test/testenv"
)

// k8s is a direct (uncached) client to the suite's API server; nil when the suite is skipped.
var k8s client.Client

// suite is the suite's control plane, for the tests that run a manager; nil when skipped.
var suite *testenv.Env

// TestMain starts one real kube-apiserver and etcd (envtest) with banlieue's CRDs and
// the test provider's. The tests drive the SDK's Reconciler by calling Reconcile, so
// every step is deterministic. Without KUBEBUILDER_ASSETS the envtest tests skip (and
// CI fails); the unit tests of the package run either way.
func TestMain(m *testing.M) {
	if !testenv.Available("the provider SDK's envtest tests") {
		os.Exit(m.Run())
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
	k8s, suite = env.Client, env
	return m.Run()
}
