package providersdk

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
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
	// InventoryInterval is how often a healthy Provider's inventory is read, and, for a
	// GuestAddressReporter session, its guests' addresses looked for; 1m when zero.
	InventoryInterval time.Duration
	// ImageResync is how often a ready image is checked again; 10m when zero.
	ImageResync time.Duration
	// MachineOptions configure the machine Reconciler further.
	MachineOptions []Option
}

// The RBAC a provider process needs, generated into config/rbac/provider: a ClusterRole
// banlieue-provider, a Role banlieue-provider in the namespace where the Providers live
// ("infra" unless an overlay moves it) and a Role banlieue-provider in the process's own
// namespace, banlieue-system. Secrets and ConfigMaps are only read, one by one, with the
// uncached API reader, so the first Role grants get on them there alone; the second holds
// the leader-election Lease and the core/v1 Events leader election records on it.
// +kubebuilder:rbac:groups=banlieue.io,resources=providers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=providers/status;providers/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages/status,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*/status;*/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",namespace=infra,resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=banlieue-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=banlieue-system,resources=events,verbs=create;patch

// Setup registers a provider's three controllers with mgr, sharing one backend session
// per Provider: machines of cfg.MachineKind, Providers of cfg.Class and VMImages with
// a source for cfg.Class.
func Setup(mgr ctrl.Manager, cfg Config) error {
	sessions := NewSessions(cfg.Driver, mgr.GetAPIReader())
	// The Provider controller wakes, through wakeups, the machines whose guests have come
	// to report an address (for sessions that are GuestAddressReporters).
	wakeups := make(chan event.GenericEvent)
	// The machines wake, through checks, a Provider whose conditions still say its
	// backend answers and takes the credentials when a machine has just met the
	// contrary, so the Provider reports the fault now, not at its next inventory refresh.
	checks := make(chan event.GenericEvent)
	opts := append([]Option{WithSessions(sessions), WithStatusBlock(cfg.StatusBlock), WithClass(cfg.Class), WithWakeups(wakeups), WithProviderWakeups(checks)}, cfg.MachineOptions...)
	if err := NewReconciler(mgr.GetClient(), cfg.MachineKind, cfg.Driver, opts...).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s controller: %w", cfg.MachineKind.Kind, err)
	}
	interval := cmp.Or(cfg.InventoryInterval, time.Minute)
	if err := NewProviderReconciler(mgr.GetClient(), cfg.Class, cfg.MachineKind, sessions, interval, WithMachineWakeups(wakeups), WithProviderChecks(checks)).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s Provider controller: %w", cfg.Class, err)
	}
	if err := NewImageReconciler(mgr.GetClient(), cfg.Class, sessions, cmp.Or(cfg.ImageResync, 10*time.Minute)).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s image controller: %w", cfg.Class, err)
	}
	return nil
}
