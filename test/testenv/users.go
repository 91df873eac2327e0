package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Kubeconfig creates a user of the API server named name, in system:masters, writes a
// kubeconfig for it to dir/name.kubeconfig and returns that path. Giving each controller
// process a user of its own lets the API server's audit log tell their requests apart.
func (e *Env) Kubeconfig(dir, name string) (string, error) {
	u, err := e.env.AddUser(crenvtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("failed to create the user %s: %w", name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("failed to render the kubeconfig of %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("failed to write the kubeconfig of %s: %w", name, err)
	}
	return path, nil
}
