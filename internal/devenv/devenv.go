package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/banlieue/banlieue/internal/admission"
)

// Options configure a development control plane.
type Options struct {
	// Assets is the folder holding etcd, kube-apiserver and kubectl.
	Assets string
	// CRDs are folders of CRD manifests to install.
	CRDs []string
	// Admission is the folder of admission policies to install (admission.Dir).
	Admission string
	// Dir is where the kubeconfig is written.
	Dir string
}

// Env is a running development control plane.
type Env struct {
	// Config is an admin REST config for the API server.
	Config *rest.Config
	// Kubeconfig is the path of the admin kubeconfig written for kubectl.
	Kubeconfig string
	// Kubectl is the path of the kubectl built with the assets.
	Kubectl string

	env *envtest.Environment
}

// Start starts etcd and kube-apiserver, installs the CRDs and the admission policies,
// and writes the kubeconfig.
func Start(o Options) (*Env, error) {
	if o.Assets == "" {
		return nil, errors.New("no envtest assets: pass --assets, or run 'make dev', which builds them")
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(o.Assets, bin)); err != nil {
			return nil, fmt.Errorf("envtest assets in %s are incomplete (%s missing); run 'make envtest-assets'", o.Assets, bin)
		}
	}
	for _, dir := range o.CRDs {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("no CRDs at %s: pass --crds, or run from the repository's root", dir)
		}
	}
	if _, err := os.Stat(o.Admission); err != nil {
		return nil, fmt.Errorf("no admission policies at %q: pass --admission, or run from the repository's root", o.Admission)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: o.Assets, CRDDirectoryPaths: o.CRDs, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves etcd and kube-apiserver running when a later step (installing
		// the CRDs) fails, so stop whatever it started.
		return nil, errors.Join(fmt.Errorf("failed to start the control plane: %w", err), env.Stop())
	}
	e := &Env{Config: cfg, Kubectl: filepath.Join(o.Assets, "kubectl"), env: env}
	if err := admission.Install(context.Background(), cfg, o.Admission); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	if err := e.writeKubeconfig(o.Dir); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

func (e *Env) writeKubeconfig(dir string) error {
	admin, err := e.env.AddUser(envtest.User{Name: "banlieue-dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("failed to create the admin user: %w", err)
	}
	data, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("failed to render the kubeconfig: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", dir, err)
	}
	path, err := filepath.Abs(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("failed to write the kubeconfig: %w", err)
	}
	e.Kubeconfig = path
	return nil
}

// Stop stops kube-apiserver and etcd and removes their temporary state.
func (e *Env) Stop() error {
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("failed to stop the control plane: %w", err)
	}
	return nil
}
