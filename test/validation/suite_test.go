// Package validation checks, against a real kube-apiserver, that the CRDs in
// config/crd/bases install cleanly and that their OpenAPI and CEL rules accept the
// manifests users write and reject bad ones with messages a person understands; and
// that the hostile manifests the API server must accept are reported by a condition of
// the core or a provider controller, never by a crash.
package validation

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/test/testenv"
)

// testNamespace is where namespaced objects (VirtualMachine, Provider) are created.
const testNamespace = "default"

var (
	// k8sClient is a direct client to the suite's API server; it works on unstructured
	// objects only, so the tests send exactly what a manifest says.
	k8sClient client.Client

	// env is the suite's control plane; tests that run controllers build their managers
	// from its config and scheme.
	env *testenv.Env

	// skipReason is set when the suite runs without an API server; every test then skips.
	skipReason string
)

// TestMain starts one kube-apiserver and etcd (envtest) with the CRDs from
// config/crd/bases, runs the tests and stops the control plane. Without
// KUBEBUILDER_ASSETS the suite fails when CI=true and skips otherwise.
func TestMain(m *testing.M) {
	if !testenv.Available("the CRD validation suite") {
		skipReason = "KUBEBUILDER_ASSETS is not set (make test sets it)"
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start("config/crd/bases")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop envtest:", err)
		}
	}()
	k8sClient = env.Client
	return m.Run()
}

// needAPIServer skips the calling test when the suite has no API server.
func needAPIServer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// testContext returns a context that ends with the test, and after at most 30 seconds.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// namespacedKinds are the kinds under test that live in a namespace.
var namespacedKinds = map[string]bool{
	"VirtualMachine":         true,
	"Provider":               true,
	"VSphereMachine":         true,
	"VSphereMachineTemplate": true,
	"LibvirtMachine":         true,
	"LibvirtMachineTemplate": true,
	"ProxmoxMachine":         true,
	"ProxmoxMachineTemplate": true,
}

// fromYAML turns one manifest into an unstructured object, putting namespaced kinds in
// testNamespace when the manifest names none, as kubectl apply would.
func fromYAML(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	data, err := utilyaml.ToJSON([]byte(manifest))
	if err != nil {
		t.Fatalf("manifest is not valid YAML: %v\n%s", err, manifest)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatalf("manifest is not a Kubernetes object: %v\n%s", err, manifest)
	}
	if namespacedKinds[u.GetKind()] && u.GetNamespace() == "" {
		u.SetNamespace(testNamespace)
	}
	return u
}

// deleteAtCleanup deletes obj when the test ends, so names can be reused.
func deleteAtCleanup(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := k8sClient.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	})
}
