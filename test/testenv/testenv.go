// Package testenv starts the real kube-apiserver and etcd that banlieue's integration
// suites run against, and holds the one rule for when their binaries are missing: a
// failure in CI (CI=true), a skip elsewhere.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/admission"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// missing says how to get the envtest binaries.
const missing = "KUBEBUILDER_ASSETS is not set; run the tests through 'make test', or set it to the folder 'bash hack/envtest.sh | tail -n 1' prints"

// Available reports whether the envtest binaries are configured. Without them it ends
// the test binary with status 1 in CI, and elsewhere prints that suite is skipped and
// returns false.
func Available(suite string) bool {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		return true
	}
	if os.Getenv("CI") == "true" {
		fmt.Fprintln(os.Stderr, missing)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "skipping %s: %s\n", suite, missing)
	return false
}

// Assets returns the envtest binaries' folder for one test, failing it in CI and
// skipping it elsewhere when there is none.
func Assets(tb testing.TB) string {
	tb.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	switch {
	case assets != "":
		return assets
	case os.Getenv("CI") == "true":
		tb.Fatal(missing)
	default:
		tb.Skip(missing)
	}
	return ""
}

// RepoPath returns a path inside the repository, given relative to its root.
func RepoPath(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

// Env is a running control plane and a client to it.
type Env struct {
	// Config is an admin config for the API server.
	Config *rest.Config
	// Client is a direct (uncached) client with Scheme.
	Client client.Client
	// Scheme holds Kubernetes' built-in types, banlieue's APIs and the TestMachine.
	Scheme *k8sruntime.Scheme

	env *crenvtest.Environment
}

// Stop stops kube-apiserver and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// EtcdURL is etcd's client address, where it also serves its Prometheus metrics.
func (e *Env) EtcdURL() *url.URL { return e.env.ControlPlane.Etcd.URL }

// InstallAdmission installs banlieue's admission policies (config/admission) as a
// cluster has them, and waits until the API server runs them. A suite whose VMs are
// deleted with no core controller running leaves them out: the finalizer they give a
// VM would keep it from ever going.
func (e *Env) InstallAdmission() error {
	return admission.Install(context.Background(), e.Config, RepoPath(admission.Dir))
}

// Start starts kube-apiserver and etcd with the CRDs in crdDirs (relative to the
// repository's root) and returns the control plane with an admin client. Controller
// logs are watched for forbidden values (ForbidInLogs), and printed only when BANLIEUE_TEST_LOGS is set:
// they are noise in a passing run.
func Start(crdDirs ...string) (*Env, error) {
	var out io.Writer = logs
	if os.Getenv("BANLIEUE_TEST_LOGS") != "" {
		out = io.MultiWriter(os.Stderr, logs)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(out)))
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	env := &crenvtest.Environment{ErrorIfCRDPathMissing: true}
	for _, d := range crdDirs {
		env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, RepoPath(d))
	}
	cfg, err := env.Start()
	if err != nil {
		// A CRD the API server refuses (a schema error, a CEL rule over its cost budget)
		// fails here, before any test runs; the API server and etcd that did start are
		// stopped, or they would outlive the test binary.
		return nil, errors.Join(fmt.Errorf("failed to start envtest or install the CRDs: %w", err), env.Stop())
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("failed to create a client: %w", err), env.Stop())
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// Scheme returns a scheme with Kubernetes' built-in types, banlieue's APIs and the test
// provider's TestMachine.
func Scheme() (*k8sruntime.Scheme, error) {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, banlieuev1.AddToScheme, infrav1.AddToScheme, testv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build the test scheme: %w", err)
		}
	}
	return s, nil
}
