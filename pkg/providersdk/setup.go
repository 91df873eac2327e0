package providersdk

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Config describes a provider for Setup: its class, its machine kind and its Driver.
type Config struct {
	// Class is the provider class the provider claims, e.g. "vsphere".
	Class string
	// MachineKind is the infrastructure machine kind core creates for the class.
	MachineKind schema.GroupVersionKind
	// Driver connects to the backend.
	Driver Driver
	// StatusBlock is the machines' status field for Observation.Details, e.g. "vsphere".
	StatusBlock string
	// InventoryInterval is how often a healthy Provider's inventory is read; 1m when zero.
	InventoryInterval time.Duration
	// ImageResync is how often a ready image is checked again; 10m when zero.
	ImageResync time.Duration
	// MachineOptions configure the machine Reconciler further.
	MachineOptions []Option
}

// The RBAC a provider process needs, generated into config/rbac/provider. Secrets and
// ConfigMaps are only read, one by one, with the uncached API reader; a deployment that
// knows its Providers' namespaces binds those two rules there alone.
// +kubebuilder:rbac:groups=banlieue.io,resources=providers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=providers/status;providers/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages/status,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*/status;*/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Setup registers a provider's three controllers with mgr, sharing one backend session
// per Provider: machines of cfg.MachineKind, Providers of cfg.Class and VMImages with
// a source for cfg.Class.
func Setup(mgr ctrl.Manager, cfg Config) error {
	sessions := NewSessions(cfg.Driver, mgr.GetAPIReader())
	opts := append([]Option{WithSessions(sessions), WithStatusBlock(cfg.StatusBlock)}, cfg.MachineOptions...)
	if err := NewReconciler(mgr.GetClient(), cfg.MachineKind, cfg.Driver, opts...).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s controller: %w", cfg.MachineKind.Kind, err)
	}
	interval := cmp.Or(cfg.InventoryInterval, time.Minute)
	if err := NewProviderReconciler(mgr.GetClient(), cfg.Class, cfg.MachineKind, sessions, interval).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s Provider controller: %w", cfg.Class, err)
	}
	if err := NewImageReconciler(mgr.GetClient(), cfg.Class, sessions, cmp.Or(cfg.ImageResync, 10*time.Minute)).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s image controller: %w", cfg.Class, err)
	}
	return nil
}
