package providersdk_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// k8s is a direct (uncached) client to the suite's API server; nil when the suite is skipped.
var k8s client.Client

// TestMain starts one real kube-apiserver and etcd (envtest) with banlieue's CRDs and
// the test provider's. The tests drive the SDK's Reconciler by calling Reconcile, so
// every step is deterministic. Without KUBEBUILDER_ASSETS the envtest tests skip (and
// CI fails); the unit tests of the package run either way.
func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set; run the tests through 'make test'")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "skipping envtest tests: KUBEBUILDER_ASSETS is not set (make test sets it)")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logs := io.Discard
	if os.Getenv("BANLIEUE_TEST_LOGS") != "" {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs)))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases"), filepath.Join("..", "..", "test", "provider", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to start envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, banlieuev1.AddToScheme, testv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
