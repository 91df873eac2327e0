package providersdk

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/ownwrites"
)

// Option configures a Reconciler.
type Option func(*Reconciler)

// NewReconciler returns a Reconciler for machines of kind gvk, backed by driver and
// reading and writing through c. The defaults are set first; opts then change them.
func NewReconciler(c client.Client, gvk schema.GroupVersionKind, driver Driver, opts ...Option) *Reconciler {
	written := ownwrites.New()
	isMachine := func(o client.Object) bool { return o.GetObjectKind().GroupVersionKind() == gvk }
	r := &Reconciler{
		client:      ownwrites.NewClient(c, written, isMachine),
		reader:      c,
		capi:        c,
		machines:    c,
		live:        c,
		written:     written,
		gvk:         gvk,
		class:       strings.ToLower(strings.TrimSuffix(gvk.Kind, "Machine")),
		finalizer:   contract.Finalizer(gvk.GroupKind()),
		callTimeout: DefaultCallTimeout,
		workers:     DefaultWorkers,
		holds:       map[types.UID]hold{},
		woke:        map[types.UID]time.Time{},
	}
	WithInFlightBackoff(time.Second, time.Minute)(r)
	WithUnreachableBackoff(5*time.Second, 5*time.Minute)(r)
	WithGuestBackoff(2*time.Second, 2*time.Minute, 16)(r)
	WithGuestWindow(2*time.Second, 30*time.Second, 5)(r)
	for _, o := range opts {
		o(r)
	}
	if r.sessions == nil {
		r.sessions = NewSessions(driver, r.reader)
	}
	r.tasks = newTaskTracker(r.class)
	r.admitter, _ = driver.(Admitter)
	return r
}

// WithFinalizer sets the finalizer the Reconciler owns on its machines. The default is
// contract.Finalizer, which core puts on every machine it creates; with another name
// the Reconciler adds its own, one more write per machine.
func WithFinalizer(name string) Option { return func(r *Reconciler) { r.finalizer = name } }

// WithClass sets the provider class the Reconciler's metrics are labelled with. The
// default is the machine kind without its "Machine" suffix, lowercased: "vsphere" for
// VSphereMachine. Setup passes Config.Class.
func WithClass(class string) Option { return func(r *Reconciler) { r.class = class } }

// WithSecretReader sets the reader Secrets (credentials, CA bundles, user-data) are read
// with. The default is the manager's API reader (uncached, so no Secret is cached
// cluster-wide), or the client.
func WithSecretReader(reader client.Reader) Option {
	return func(r *Reconciler) { r.reader, r.readerSet = reader, true }
}

// WithSessions shares backend sessions with the Provider and VMImage reconcilers of the
// same provider, so each Provider has one session in the process.
func WithSessions(s *Sessions) Option {
	return func(r *Reconciler) { r.sessions, r.sessionsSet = s, true }
}

// WithStatusBlock names the machine's status field that Observation.Details are written
// to, e.g. "vsphere" for status.vsphere. Without it Details are dropped.
func WithStatusBlock(field string) Option { return func(r *Reconciler) { r.statusBlock = field } }

// DefaultWorkers is how many machines a Reconciler reconciles at once without WithWorkers.
const DefaultWorkers = 10

// WithWorkers sets how many machines are reconciled at once; DefaultWorkers by default.
// Backend calls never block on a task, so workers spend their time in the backend's API.
func WithWorkers(n int) Option { return func(r *Reconciler) { r.workers = n } }

// WithCallTimeout bounds the backend calls of one reconcile; DefaultCallTimeout when unset.
func WithCallTimeout(d time.Duration) Option { return func(r *Reconciler) { r.callTimeout = d } }

// WithInFlightBackoff sets the requeue interval while a backend task is in flight: it
// starts at base and doubles up to maxDelay. The default is 1s to 1m.
func WithInFlightBackoff(base, maxDelay time.Duration) Option {
	return func(r *Reconciler) {
		r.inFlight = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, maxDelay)
	}
}

// WithUnreachableBackoff sets the requeue interval while the backend is unreachable, or
// refuses the credentials, or a task failed: it starts at base and doubles up to
// maxDelay. The default is 5s to 5m.
func WithUnreachableBackoff(base, maxDelay time.Duration) Option {
	return func(r *Reconciler) {
		r.unreachable = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, maxDelay)
	}
}

// WithGuestBackoff sets how a running VM whose guest has reported no address yet is
// looked at again, when the driver's session is no GuestAddressReporter: from base,
// doubling up to maxDelay, for maxLooks looks; then only events wake it. A guest with
// no operating system never reports one. The default is 2s to 2m, 16 looks (about 25
// minutes).
func WithGuestBackoff(base, maxDelay time.Duration, maxLooks int) Option {
	return func(r *Reconciler) { r.guest = newBoundedLimiter(base, maxDelay, maxLooks) }
}

// WithGuestWindow sets how a running VM whose guest has reported no address yet is
// looked at again when the driver's session is a GuestAddressReporter: from base,
// doubling up to maxDelay, for maxLooks looks, so that a guest that comes up quickly
// has its address within seconds; after that the Provider controller's inventory
// refresh wakes the machine once its VM reports one. No look costs a backend call per
// VM: a look asks GuestsWithAddresses, one answer per Provider serving the looks of
// base, and only a machine whose VM the answer lists is observed. The default is 2s to
// 30s, 5 looks (about a minute, the default inventory interval).
func WithGuestWindow(base, maxDelay time.Duration, maxLooks int) Option {
	return func(r *Reconciler) {
		r.guestWindow = newBoundedLimiter(base, maxDelay, maxLooks)
		r.looks = newGuestLooks(base)
	}
}

// WithWakeups makes the Reconciler also reconcile the machines sent on ch. Setup passes
// the channel the Provider controller wakes machines whose guests now report an address
// through (WithMachineWakeups).
func WithWakeups(ch <-chan event.GenericEvent) Option {
	return func(r *Reconciler) { r.wakeups = ch }
}

// WithProviderWakeups makes the Reconciler send on ch the Provider of a machine that met
// an unreachable backend, or rejected credentials, while the Provider's
// BackendReachable, or CredentialsValid, condition still says True, so that the Provider
// controller checks it now rather than at its next inventory refresh. Setup hands the
// same channel to the ProviderReconciler (WithProviderChecks). A send waits for the
// receiver, or for ctx to end.
func WithProviderWakeups(ch chan<- event.GenericEvent) Option {
	return func(r *Reconciler) { r.providerWakeups = ch }
}

// WithTaskRecordDelay keeps a machine's new backend task in memory, not in its status,
// until the task has run for delay, so that a task that ends sooner costs no status
// write (see unrecordedTasks). Setup passes
// DefaultTaskRecordDelay; 0, the default of NewReconciler, writes every task at once.
func WithTaskRecordDelay(delay time.Duration) Option {
	return func(r *Reconciler) { r.unrecorded = &unrecordedTasks{delay: delay} }
}

// WithShard restricts the machines the Reconciler reconciles to those of the Providers
// shard serves; Setup passes the process's. Other machines are left alone, not even
// given a finalizer: another shard reconciles them.
func WithShard(shard *Shard) Option { return func(r *Reconciler) { r.shard = shard } }

// WithWatchScope restricts the machines the Reconciler reconciles to those in namespace
// (all when empty) that carry the label WatchFilterLabel with the value filter (any
// when empty), as Cluster API's --namespace and --watch-filter do; the Cluster API
// Machines and Clusters whose changes wake machines are filtered by the same label.
// Machines outside the scope are left alone, whatever wakes them: another provider
// process reconciles them. Setup passes Config.Namespace and Config.WatchFilter.
func WithWatchScope(namespace, filter string) Option {
	return func(r *Reconciler) { r.namespace, r.watchFilter = namespace, filter }
}
