package providersdk

import (
	"cmp"
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/sharding"
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
	// OrphanScanInterval is how often, at most, a healthy Provider whose session is an
	// OrphanLister is scanned for orphaned VMs; 10m when zero.
	OrphanScanInterval time.Duration
	// ImageResync is how often a ready image is checked again; 10m when zero.
	ImageResync time.Duration
	// MachineOptions configure the machine Reconciler further.
	MachineOptions []Option
	// Namespace, when set, is the only namespace whose machines the provider
	// reconciles (Cluster API's --namespace); all when empty. See CacheOptions for what
	// it restricts and what it does not.
	Namespace string
	// WatchFilter, when set, is the value of the label WatchFilterLabel that the
	// machines the provider reconciles, and the Cluster API objects it acts on, must
	// carry (Cluster API's --watch-filter); none when empty.
	WatchFilter string
	// ProviderSelector, when set, is a label selector (e.g. "site=dc1") that the
	// Providers of the class this process serves must match, with their machines and
	// images: a provider shard (see Shard). All the class's Providers when empty.
	ProviderSelector string
	// ShardNamespace is where the process registers its shard (a Lease);
	// DefaultShardNamespace when empty.
	ShardNamespace string
}

// CacheOptions returns opts for the manager Setup is given, restricted to
// cfg.Namespace when it is set: the namespaced objects the manager caches, Cluster
// API's Machines and Clusters among them, are then those of that namespace, but for
// two kinds that stay cached in every namespace. Providers live in their own
// namespaces (and their credentials Secrets with them, read uncached as before); and
// the machines of cfg.MachineKind, because a Provider being deleted is held until no
// machine of any namespace runs on it, whichever provider process reconciles them.
// Which machines are reconciled is decided by Config.Namespace and Config.WatchFilter
// in Setup, not by the cache. Secrets, read uncached, are read only for the machines
// reconciled: user data in cfg.Namespace, credentials in the Providers' namespaces.
//
// The cache is not filtered by cfg.WatchFilter: Cluster API's CRDs need not be
// installed when the manager is made, and a cache option on their kinds would need
// them; Setup filters by predicates instead.
func (cfg Config) CacheOptions(opts cache.Options) cache.Options {
	if cfg.Namespace == "" {
		return opts
	}
	all := map[string]cache.Config{cache.AllNamespaces: {}}
	machines := &unstructured.Unstructured{}
	machines.SetGroupVersionKind(cfg.MachineKind)
	opts.DefaultNamespaces = map[string]cache.Config{cfg.Namespace: {}}
	byObject := maps.Clone(opts.ByObject)
	if byObject == nil {
		byObject = map[client.Object]cache.ByObject{}
	}
	byObject[&banlieuev1.Provider{}] = cache.ByObject{Namespaces: all}
	byObject[machines] = cache.ByObject{Namespaces: all}
	opts.ByObject = byObject
	return opts
}

// The RBAC a provider process needs, generated into config/rbac/provider: a ClusterRole
// banlieue-provider, a Role banlieue-provider in the namespace where the Providers live
// ("infra" unless an overlay moves it) and a Role banlieue-provider in the process's own
// namespace, banlieue-system. Secrets and ConfigMaps are only read, one by one, with the
// uncached API reader, so the first Role grants get on them there alone; the second holds
// the leader-election Lease, the shard's registration Lease (see Shard) and the core/v1
// Events leader election records on it.
// +kubebuilder:rbac:groups=banlieue.io,resources=providers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=providers/status;providers/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=banlieue.io,resources=vmimages/status,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*/status;*/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",namespace=infra,resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=banlieue-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=banlieue-system,resources=events,verbs=create;patch

// Setup registers a provider's three controllers with mgr, sharing one backend session
// per Provider: machines of cfg.MachineKind, Providers of cfg.Class and VMImages with
// a source for cfg.Class.
func Setup(mgr ctrl.Manager, cfg Config) error {
	shard, err := NewShard(cfg.Class, cfg.ProviderSelector, cfg.ShardNamespace)
	if err != nil {
		return err
	}
	// Uncached: the few shards' Leases are listed at most every sharding.DefaultListTTL,
	// and a cache would need every caller of Setup to scope it to the shards' namespace.
	shard.registry.Bind(mgr.GetAPIReader(), mgr.GetClient(), sharding.DefaultListTTL)
	if err := mgr.Add(shard.registry); err != nil {
		return fmt.Errorf("failed to register the provider shard: %w", err)
	}
	sessions := NewSessions(cfg.Driver, mgr.GetAPIReader())
	// The Provider controller wakes, through wakeups, the machines whose guests have come
	// to report an address (for sessions that are GuestAddressReporters).
	wakeups := make(chan event.GenericEvent)
	// The machines wake, through checks, a Provider whose conditions still say its
	// backend answers and takes the credentials when a machine has just met the
	// contrary, so the Provider reports the fault now, not at its next inventory refresh.
	checks := make(chan event.GenericEvent)
	opts := append([]Option{WithSessions(sessions), WithStatusBlock(cfg.StatusBlock), WithClass(cfg.Class), WithWakeups(wakeups), WithProviderWakeups(checks),
		WithWatchScope(cfg.Namespace, cfg.WatchFilter), WithShard(shard), WithTaskRecordDelay(DefaultTaskRecordDelay)}, cfg.MachineOptions...)
	if err := NewReconciler(mgr.GetClient(), cfg.MachineKind, cfg.Driver, opts...).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s controller: %w", cfg.MachineKind.Kind, err)
	}
	interval := cmp.Or(cfg.InventoryInterval, time.Minute)
	if err := NewProviderReconciler(mgr.GetClient(), cfg.Class, cfg.MachineKind, sessions, interval, WithMachineWakeups(wakeups), WithProviderChecks(checks),
		WithOrphanScan(cmp.Or(cfg.OrphanScanInterval, 10*time.Minute)), WithAPIReader(mgr.GetAPIReader()),
		WithEventRecorder(mgr.GetEventRecorder("banlieue-"+cfg.Class+"-provider")), WithProviderShard(shard)).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s Provider controller: %w", cfg.Class, err)
	}
	images := NewImageReconciler(mgr.GetClient(), cfg.Class, sessions, cmp.Or(cfg.ImageResync, 10*time.Minute))
	images.shard = shard
	if err := images.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the %s image controller: %w", cfg.Class, err)
	}
	return nil
}
