package providersdk

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
)

// PausedAnnotation pauses the reconciliation of a machine that carries it (Cluster API's).
const PausedAnnotation = "cluster.x-k8s.io/paused"

// paused reports whether the machine carries Cluster API's paused annotation or the one
// core sets for a paused VirtualMachine.
func paused(u *unstructured.Unstructured) bool {
	a := u.GetAnnotations()
	_, capi := a[PausedAnnotation]
	_, vm := a[infrav1.PausedAnnotation]
	return capi || vm
}

// Reconciler reconciles the infrastructure machines of one kind through a Driver.
type Reconciler struct {
	client      client.Client
	reader      client.Reader
	gvk         schema.GroupVersionKind
	class       string
	finalizer   string
	sessions    *Sessions
	statusBlock string
	callTimeout time.Duration
	workers     int

	inFlight    workqueue.TypedRateLimiter[types.UID]
	unreachable workqueue.TypedRateLimiter[types.UID]
	guest       workqueue.TypedRateLimiter[types.UID]
	guestWindow workqueue.TypedRateLimiter[types.UID]
	readerSet   bool
	sessionsSet bool

	// wakeups carries machines the Provider controller wakes; nil when none does.
	wakeups <-chan event.GenericEvent
	// providerWakeups is where Providers whose conditions a machine found stale are
	// sent; nil when nothing listens.
	providerWakeups chan<- event.GenericEvent

	wokeMu sync.Mutex
	// woke is when each Provider, by UID, was last woken.
	woke map[types.UID]time.Time

	holdsMu sync.Mutex
	holds   map[types.UID]hold

	tasks *taskTracker
}

// hold keeps a machine whose backend task failed from being retried before its backoff
// has passed, whatever event wakes it (its own status write does), unless its spec
// changes.
type hold struct {
	until      time.Time
	generation int64
}

// Option configures a Reconciler.
type Option func(*Reconciler)

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

// WithWorkers sets how many machines are reconciled at once; 10 by default. Backend
// calls never block on a task, so workers spend their time in the backend's API.
func WithWorkers(n int) Option { return func(r *Reconciler) { r.workers = n } }

// WithCallTimeout bounds the backend calls of one reconcile; DefaultCallTimeout when unset.
func WithCallTimeout(d time.Duration) Option { return func(r *Reconciler) { r.callTimeout = d } }

// WithInFlightBackoff sets the requeue interval while a backend task is in flight: it
// starts at base and doubles up to max. The default is 1s to 1m.
func WithInFlightBackoff(base, max time.Duration) Option {
	return func(r *Reconciler) {
		r.inFlight = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, max)
	}
}

// WithUnreachableBackoff sets the requeue interval while the backend is unreachable, or
// refuses the credentials, or a task failed: it starts at base and doubles up to max.
// The default is 5s to 5m.
func WithUnreachableBackoff(base, max time.Duration) Option {
	return func(r *Reconciler) {
		r.unreachable = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, max)
	}
}

// WithGuestBackoff sets how a running VM whose guest has reported no address yet is
// looked at again, when the driver's session is no GuestAddressReporter: from base,
// doubling up to max, for maxLooks looks; then only events wake it. A guest with no
// operating system never reports one. The default is 2s to 2m, 16 looks (about 25
// minutes).
func WithGuestBackoff(base, max time.Duration, maxLooks int) Option {
	return func(r *Reconciler) {
		r.guest = &boundedLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, max), max: maxLooks}
	}
}

// WithGuestWindow sets how a running VM whose guest has reported no address yet is
// looked at again when the driver's session is a GuestAddressReporter: from base,
// doubling up to max, for maxLooks looks, so that a guest that comes up quickly has its
// address within seconds; after that the Provider controller's inventory refresh wakes
// the machine once its VM reports one, and no look costs a backend call per VM. The
// default is 2s to 30s, 5 looks (about a minute, the default inventory interval).
func WithGuestWindow(base, max time.Duration, maxLooks int) Option {
	return func(r *Reconciler) {
		r.guestWindow = &boundedLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](base, max), max: maxLooks}
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

// NewReconciler returns a Reconciler for machines of kind gvk, backed by driver and
// reading and writing through c.
func NewReconciler(c client.Client, gvk schema.GroupVersionKind, driver Driver, opts ...Option) *Reconciler {
	r := &Reconciler{
		client:      c,
		reader:      c,
		gvk:         gvk,
		class:       strings.ToLower(strings.TrimSuffix(gvk.Kind, "Machine")),
		finalizer:   contract.Finalizer(gvk.GroupKind()),
		callTimeout: DefaultCallTimeout,
		workers:     10,
		holds:       map[types.UID]hold{},
		woke:        map[types.UID]time.Time{},
		inFlight:    workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Second, time.Minute),
		unreachable: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Second, 5*time.Minute),
	}
	WithGuestBackoff(2*time.Second, 2*time.Minute, 16)(r)
	WithGuestWindow(2*time.Second, 30*time.Second, 5)(r)
	for _, o := range opts {
		o(r)
	}
	if r.sessions == nil {
		r.sessions = NewSessions(driver, r.reader)
	}
	r.tasks = newTaskTracker(r.class)
	return r
}

// Finalizer returns the finalizer the Reconciler owns on its machines.
func (r *Reconciler) Finalizer() string { return r.finalizer }

// SetupWithManager registers the Reconciler with mgr. It watches its machines and the
// Providers they run on, for the changes the machines act on (providerChangeWakesMachines).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if !r.readerSet {
		r.reader = mgr.GetAPIReader()
		if !r.sessionsSet {
			r.sessions.reader = r.reader
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	b := ctrl.NewControllerManagedBy(mgr).
		For(u, builder.WithPredicates(machineChanged())).
		Watches(&banlieuev1.Provider{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfProvider),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: providerChangeWakesMachines}))
	if r.wakeups != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	}
	return b.Named(strings.ToLower(r.gvk.Kind)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(r)
}

// machineChanged passes the machine updates the Reconciler has to act on: a new
// generation or new annotations. Its own status writes change neither, and its
// spec.providerID write changes nothing else; waking on them would cost a backend look
// per write.
func machineChanged() predicate.Predicate {
	return predicate.And[client.Object](
		predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}),
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*unstructured.Unstructured)
			n, okNew := e.ObjectNew.(*unstructured.Unstructured)
			return !okOld || !okNew || !contract.OnlyProviderIDChanged(o, n)
		}},
	)
}

// machinesOfProvider maps a Provider to the machines on it.
func (r *Reconciler) machinesOfProvider(ctx context.Context, p client.Object) []reconcile.Request {
	machines, err := machinesOn(ctx, r.client, r.gvk, p)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list machines of Provider", "Provider", klog.KObj(p))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(machines))
	for i := range machines {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&machines[i])})
	}
	return reqs
}

// providerHealth are the Provider conditions whose status machines act on: a machine
// backing off from an unreachable backend or rejected credentials retries as soon as
// one of them changes.
var providerHealth = []string{banlieuev1.ReadyCondition, banlieuev1.ProviderBackendReachableCondition, banlieuev1.ProviderCredentialsValidCondition}

// providerChangeWakesMachines reports whether a Provider update changed what its
// machines act on: its spec (paused included), its deletion, its annotations or the
// status of a providerHealth condition. The Provider controller's periodic check
// rewrites failure domains and messages; waking every machine of the Provider for those
// would cost a backend look per machine.
func providerChangeWakesMachines(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*banlieuev1.Provider)
	p, okNew := e.ObjectNew.(*banlieuev1.Provider)
	if !okOld || !okNew {
		return true
	}
	if old.Generation != p.Generation || !old.DeletionTimestamp.Equal(p.DeletionTimestamp) || !maps.Equal(old.Annotations, p.Annotations) {
		return true
	}
	for _, t := range providerHealth {
		if conditionStatus(old.Status.Conditions, t) != conditionStatus(p.Status.Conditions, t) {
			return true
		}
	}
	return false
}

// conditionStatus is the status of the condition t, "" when there is none.
func conditionStatus(conditions []metav1.Condition, t string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conditions, t); c != nil {
		return c.Status
	}
	return ""
}

// Reconcile brings one machine's backend VM in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	if err := r.client.Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.tasks.forgetName(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues(r.gvk.Kind, klog.KObj(u))
	ctx = ctrl.LoggerInto(ctx, log)
	deleting := !u.GetDeletionTimestamp().IsZero()
	if deleting && !controllerutil.ContainsFinalizer(u, r.finalizer) {
		r.tasks.set(u.GetUID(), req.NamespacedName, false)
		return ctrl.Result{}, nil
	}
	if !deleting && !controllerutil.ContainsFinalizer(u, r.finalizer) {
		before := u.DeepCopy()
		controllerutil.AddFinalizer(u, r.finalizer)
		if err := r.client.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add finalizer: %w", err)
		}
	}
	spec, err := contract.Spec(u)
	if err != nil {
		return ctrl.Result{}, err
	}
	log = log.WithValues("Provider", klog.KRef(spec.ProviderRef.Namespace, spec.ProviderRef.Name))
	ctx = ctrl.LoggerInto(ctx, log)
	s := &scope{machine: &Machine{UID: u.GetUID(), Namespace: u.GetNamespace(), Name: u.GetName(), Generation: u.GetGeneration(), Spec: spec, Object: u}}
	if s.status, err = contract.Status(u); err != nil {
		return ctrl.Result{}, err
	}
	if t := s.status.Task; t != nil {
		s.machine.Task = Task{Ref: t.Ref, Operation: t.Operation, StartedAt: t.StartedAt.Time}
	}
	before := s.status.DeepCopy()
	// Every return below leaves s.status as stored or as just written. A failed write
	// counts what was meant; its retry corrects the count. A machine whose finalizer
	// was removed no longer counts.
	defer func() {
		r.tasks.set(u.GetUID(), req.NamespacedName, s.status.Task != nil && controllerutil.ContainsFinalizer(u, r.finalizer))
	}()
	if paused(u) {
		log.V(4).Info("Machine is paused")
		return ctrl.Result{}, nil
	}

	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: spec.ProviderRef.Namespace, Name: spec.ProviderRef.Name}, p); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("failed to get Provider: %w", err)
		}
		if deleting {
			// With its Provider gone the backend can no longer be reached through banlieue;
			// holding the machine forever would block the VM, so it is released.
			log.Info("Provider is gone; releasing the machine without deleting a backend VM")
			return ctrl.Result{}, r.removeFinalizer(ctx, u)
		}
		s.ready(metav1.ConditionFalse, infrav1.MachineProviderNotFoundReason, fmt.Sprintf("Provider %s/%s not found", spec.ProviderRef.Namespace, spec.ProviderRef.Name))
		return ctrl.Result{}, r.patchStatus(ctx, u, before, s)
	}
	if p.Spec.Paused {
		log.V(4).Info("Provider is paused")
		return ctrl.Result{}, nil
	}

	if !deleting {
		if wait := r.held(s.machine); wait > 0 {
			log.V(4).Info("Waiting before retrying a failed task", "after", wait.String())
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	err = withBackend(ctx, r.callTimeout, func(ctx context.Context) error {
		cl, err := r.sessions.Session(ctx, p)
		if err != nil {
			return err
		}
		_, s.guestsReported = cl.(GuestAddressReporter)
		if deleting {
			return r.reconcileDelete(ctx, cl, s)
		}
		return r.reconcileNormal(ctx, cl, s)
	})
	if errors.Is(err, errGone) {
		return ctrl.Result{}, r.removeFinalizer(ctx, u)
	}
	res, err := r.classify(ctx, p, s, err)
	if perr := r.patchStatus(ctx, u, before, s); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return res, err
}

// errGone says the deleted machine's VM is gone and the finalizer may go.
var errGone = errors.New("backend VM is gone")

// errUserDataNotFound says the Secret or key in spec.userData does not exist.
var errUserDataNotFound = errors.New("user-data not found")

// userData reads the payload spec.userData names, or nil when there is none.
func (r *Reconciler) userData(ctx context.Context, m *Machine) ([]byte, error) {
	ud := m.Spec.UserData
	if ud == nil {
		return nil, nil
	}
	key := ud.Key
	if key == "" {
		key = "user-data"
	}
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ud.SecretRef.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s/%s named by the VM's spec.userData does not exist; create it in the VM's namespace: %w",
				m.Namespace, ud.SecretRef.Name, errUserDataNotFound)
		}
		return nil, fmt.Errorf("failed to get user-data Secret: %w", err)
	}
	data, ok := secret.Data[key]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no key %q (it has %s); add the key, or set the VM's spec.userData.key: %w",
			m.Namespace, ud.SecretRef.Name, key, keysOf(secret.Data), errUserDataNotFound)
	}
	return data, nil
}

// maxSyncSteps bounds the synchronous steps (a Create or an Update that returns without
// a task) one reconcile takes. A driver whose update is several synchronous calls (a
// config change, then a disk resize, then a power-on task) takes them in one reconcile
// instead of paying a status write and a requeue for each; the bound keeps an Update
// that never brings the VM up to date from holding a worker and calling the backend in
// a loop: the machine then waits as it would after one step.
const maxSyncSteps = 4

// reconcileNormal creates or updates the VM and records what it observes.
func (r *Reconciler) reconcileNormal(ctx context.Context, cl Client, s *scope) error {
	obs, err := cl.Observe(ctx, s.machine)
	if err != nil {
		return fmt.Errorf("failed to observe VM: %w", err)
	}
	steps := 0
	if !obs.Task.InFlight() && !obs.Exists {
		if s.machine.UserData, err = r.userData(ctx, s.machine); err != nil {
			return err
		}
		res, err := cl.Create(ctx, s.machine)
		if err != nil {
			return fmt.Errorf("failed to create VM: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("Created backend VM")
		if res.Task.InFlight() {
			s.observe(obs, res.Task)
			return &InFlightError{Task: res.Task}
		}
		steps++
		if obs, err = cl.Observe(ctx, s.machine); err != nil {
			return fmt.Errorf("failed to observe VM: %w", err)
		}
		// A VM that a synchronous Create made but Observe does not see yet is waited
		// for, never created again in the same reconcile.
	}
	for ; !obs.Task.InFlight() && obs.Exists && !obs.UpToDate && steps < maxSyncSteps; steps++ {
		res, err := cl.Update(ctx, s.machine, obs)
		if err != nil {
			return fmt.Errorf("failed to update VM: %w", err)
		}
		if res.Task.InFlight() {
			s.observe(obs, res.Task)
			return &InFlightError{Task: res.Task}
		}
		if obs, err = cl.Observe(ctx, s.machine); err != nil {
			return fmt.Errorf("failed to observe VM: %w", err)
		}
	}
	s.observe(obs, obs.Task)
	switch {
	case obs.Task.InFlight():
		return &InFlightError{Task: obs.Task}
	case !obs.Exists:
		return &InFlightError{Task: Task{Operation: OperationCreate}}
	case !obs.UpToDate:
		return &InFlightError{Task: Task{Operation: OperationUpdate}}
	}
	if err := r.writeProviderID(ctx, s, obs.ProviderID); err != nil {
		return err
	}
	s.ready(metav1.ConditionTrue, infrav1.MachineProvisionedReason, "")
	s.succeeded = true
	s.waitingForGuest = obs.WaitingForGuest
	return nil
}

// reconcileDelete deletes the VM; it returns errGone once the VM no longer exists.
func (r *Reconciler) reconcileDelete(ctx context.Context, cl Client, s *scope) error {
	obs, err := cl.Observe(ctx, s.machine)
	if err != nil {
		return fmt.Errorf("failed to observe VM: %w", err)
	}
	// A task in flight comes first: a VM still being cloned may not be visible yet, and
	// releasing the machine then would orphan it.
	if obs.Task.InFlight() {
		s.setTask(obs.Task)
		return &InFlightError{Task: obs.Task}
	}
	if !obs.Exists {
		return errGone
	}
	res, err := cl.Delete(ctx, s.machine)
	if err != nil {
		return fmt.Errorf("failed to delete VM: %w", err)
	}
	if res.Task.InFlight() {
		s.setTask(res.Task)
		return &InFlightError{Task: res.Task}
	}
	if obs, err = cl.Observe(ctx, s.machine); err != nil {
		return fmt.Errorf("failed to observe VM: %w", err)
	}
	if !obs.Exists {
		ctrl.LoggerFrom(ctx).Info("Deleted backend VM")
		return errGone
	}
	return &InFlightError{Task: Task{Operation: OperationDelete}}
}

// classify turns the reconcile's error into the Ready condition and a requeue.
func (r *Reconciler) classify(ctx context.Context, p *banlieuev1.Provider, s *scope, err error) (ctrl.Result, error) {
	uid := s.machine.UID
	var (
		perm       *PermanentError
		inFlight   *InFlightError
		unreach    *UnreachableError
		unauth     *UnauthorizedError
		taskFailed *TaskFailedError
	)
	if err != nil || !s.waitingForGuest {
		r.guest.Forget(uid)
		r.guestWindow.Forget(uid)
	}
	switch {
	case err == nil:
		r.inFlight.Forget(uid)
		r.unreachable.Forget(uid)
		if s.waitingForGuest {
			looks := r.guest
			if s.guestsReported {
				// After the window, the Provider controller wakes the machine once its
				// VM reports an address: no look per VM in the meantime.
				looks = r.guestWindow
			}
			if after := looks.When(uid); after > 0 {
				return ctrl.Result{RequeueAfter: after}, nil
			}
		}
		return ctrl.Result{}, nil
	case errors.As(err, &perm):
		r.inFlight.Forget(uid)
		r.unreachable.Forget(uid)
		reason := perm.Reason
		if reason == "" {
			reason = infrav1.MachineFailedReason
		}
		s.ready(metav1.ConditionFalse, reason, perm.Message)
		return ctrl.Result{}, nil
	case errors.As(err, &inFlight):
		r.unreachable.Forget(uid)
		// A wait without a task reference (the backend is busy with something the driver
		// found, not started) keeps the task already recorded: it is the one to poll.
		if inFlight.Task.InFlight() {
			s.setTask(inFlight.Task)
		}
		if inFlight.Task.InFlight() && inFlight.Task.Ref != s.machine.Task.Ref {
			// Polling backs off per task: a new task (the next step of a multi-step
			// update, say) is looked at soon again.
			r.inFlight.Forget(uid)
		}
		s.ready(metav1.ConditionFalse, taskReason(inFlight.Task.Operation), inFlight.Task.Operation+" in progress")
		return ctrl.Result{RequeueAfter: r.inFlight.When(uid)}, nil
	case errors.As(err, &taskFailed):
		// The task is over; the next attempt starts afresh after a backoff.
		r.inFlight.Forget(uid)
		s.setTask(Task{})
		s.ready(metav1.ConditionFalse, infrav1.MachineTaskFailedReason, taskFailed.Error())
		after := r.unreachable.When(uid)
		r.hold(s.machine, after)
		return ctrl.Result{RequeueAfter: after}, nil
	case errors.As(err, &unreach):
		r.sessions.Forget(ctx, p.UID)
		r.wakeProvider(ctx, p, banlieuev1.ProviderBackendReachableCondition)
		s.ready(metav1.ConditionFalse, infrav1.MachineBackendUnreachableReason, unreach.Error())
		after := r.unreachable.When(uid)
		ctrl.LoggerFrom(ctx).Info("Backend unreachable; retrying", "err", unreach.Error(), "after", after.String())
		return ctrl.Result{RequeueAfter: after}, nil
	case errors.As(err, &unauth):
		r.sessions.Forget(ctx, p.UID)
		r.wakeProvider(ctx, p, banlieuev1.ProviderCredentialsValidCondition)
		s.ready(metav1.ConditionFalse, infrav1.MachineCredentialsRejectedReason, unauth.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.Is(err, errCredentialsNotFound), errors.Is(err, errCABundleNotFound):
		s.ready(metav1.ConditionFalse, infrav1.MachineCredentialsNotFoundReason, err.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	case errors.Is(err, errUserDataNotFound):
		s.ready(metav1.ConditionFalse, infrav1.MachineUserDataNotFoundReason, err.Error())
		return ctrl.Result{RequeueAfter: r.unreachable.When(uid)}, nil
	default:
		s.ready(metav1.ConditionFalse, infrav1.MachineReconcileErrorReason, err.Error())
		return ctrl.Result{}, err
	}
}

// providerWakeGap is the least time between two wakes of one Provider. A Provider whose
// check disagrees with its machines (its inventory answers while their VMs' calls fail,
// as when one Proxmox VE node is down) is then checked at most this often for them, not
// once per failing machine's retry.
const providerWakeGap = 10 * time.Second

// wakeProvider has the Provider controller check p now when p's condition cond still
// says True although the machine just met the contrary. Once the check has written
// False, machines no longer wake it: a thousand machines meeting the same outage cost
// one check.
func (r *Reconciler) wakeProvider(ctx context.Context, p *banlieuev1.Provider, cond string) {
	if r.providerWakeups == nil || !meta.IsStatusConditionTrue(p.Status.Conditions, cond) {
		return
	}
	r.wokeMu.Lock()
	if time.Since(r.woke[p.UID]) < providerWakeGap {
		r.wokeMu.Unlock()
		return
	}
	r.woke[p.UID] = time.Now()
	r.wokeMu.Unlock()
	select {
	case r.providerWakeups <- event.GenericEvent{Object: p}:
		ctrl.LoggerFrom(ctx).V(2).Info("Woke the Provider, whose condition is stale", "condition", cond)
	case <-ctx.Done():
	}
}

// boundedLimiter stops handing out intervals after max looks: When returns 0 then.
type boundedLimiter struct {
	workqueue.TypedRateLimiter[types.UID]
	max int
}

// When returns the next interval, or 0 once max looks were handed out.
func (l *boundedLimiter) When(uid types.UID) time.Duration {
	if l.NumRequeues(uid) >= l.max {
		return 0
	}
	return l.TypedRateLimiter.When(uid)
}

// taskReason is the Ready reason while a task doing operation is in flight.
func taskReason(operation string) string {
	switch operation {
	case OperationCreate:
		return infrav1.MachineCreatingReason
	case OperationClone:
		return infrav1.MachineCloningReason
	case OperationUpdate:
		return infrav1.MachineUpdatingReason
	case OperationDelete:
		return infrav1.MachineDeletingReason
	}
	return infrav1.MachineTaskInFlightReason
}

// writeProviderID patches spec.providerID when the backend reports a new one.
func (r *Reconciler) writeProviderID(ctx context.Context, s *scope, id string) error {
	u := s.machine.Object
	if id == "" || contract.ProviderID(u) == id {
		return nil
	}
	before := u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, id, "spec", "providerID"); err != nil {
		return fmt.Errorf("failed to set spec.providerID: %w", err)
	}
	if err := r.client.Patch(ctx, u, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("failed to write spec.providerID: %w", err)
	}
	// Writing the spec advanced the generation; the status describes the new one.
	s.machine.Generation = u.GetGeneration()
	return nil
}

func (r *Reconciler) removeFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	before := u.DeepCopy()
	if !controllerutil.RemoveFinalizer(u, r.finalizer) {
		return nil
	}
	r.inFlight.Forget(u.GetUID())
	r.unreachable.Forget(u.GetUID())
	r.guest.Forget(u.GetUID())
	r.guestWindow.Forget(u.GetUID())
	r.holdsMu.Lock()
	delete(r.holds, u.GetUID())
	r.holdsMu.Unlock()
	if err := r.client.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to remove finalizer: %w", err))
	}
	return nil
}

// hold keeps m from being retried for d.
func (r *Reconciler) hold(m *Machine, d time.Duration) {
	r.holdsMu.Lock()
	defer r.holdsMu.Unlock()
	r.holds[m.UID] = hold{until: time.Now().Add(d), generation: m.Generation}
}

// held returns how long m must still wait before it is retried; 0 when it need not.
func (r *Reconciler) held(m *Machine) time.Duration {
	r.holdsMu.Lock()
	defer r.holdsMu.Unlock()
	h, ok := r.holds[m.UID]
	if !ok {
		return 0
	}
	if wait := time.Until(h.until); wait > 0 && h.generation == m.Generation {
		return wait
	}
	delete(r.holds, m.UID)
	return 0
}

// keysOf lists a Secret's keys, sorted, for a message; never its values.
func keysOf(data map[string][]byte) string {
	if len(data) == 0 {
		return "no keys"
	}
	keys := slices.Sorted(maps.Keys(data))
	return fmt.Sprintf("%q", keys)
}
