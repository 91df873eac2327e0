package virtualmachine

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// Reconciler reconciles VirtualMachines.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
}

// SetupWithManager registers the controller and its watches with mgr.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	return nil
}
