package providersdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
	"github.com/banlieue/banlieue/pkg/sharding"
)

// ProviderFinalizer keeps a Provider until no infrastructure machine runs on it, so its
// backend VMs are always deleted through it and never orphaned.
const ProviderFinalizer = "banlieue.io/provider"

// ProviderReconciler claims the Providers of one provider class: it publishes the
// machine kind core creates for them, checks the backend and credentials, reads the
// inventory into failure domains on a modest interval and whenever a machine finds the
// Provider's conditions stale, wakes the machines whose guests have come to report an
// address, and holds a Provider being deleted until its machines are gone.
type ProviderReconciler struct {
	client   client.Client
	class    string
	gvk      schema.GroupVersionKind
	sessions *Sessions
	interval time.Duration
	backoff  workqueue.TypedRateLimiter[types.UID]

	// machines reads the machines that may be woken: the manager's cache once set up.
	machines client.Reader
	// wakeups is where machines whose guests now report an address are sent; nil when
	// nothing listens.
	wakeups chan<- event.GenericEvent
	// checks carries Providers that machines wake (WithProviderChecks); nil when none does.
	checks <-chan event.GenericEvent

	// orphanScan is how often a Provider's orphaned VMs are looked for (WithOrphanScan);
	// nil when never.
	orphanScan *time.Duration
	// live confirms, uncached, that the machine an orphan's mark names is gone.
	live client.Reader
	// shard is the part of the class's Providers served (WithProviderShard); all when nil.
	shard *Shard
	// recorder records Events on Providers (an orphan deleted); none when nil.
	recorder events.EventRecorder
	// mu guards lastScan, lastOrphans and orphansDeleting.
	mu sync.Mutex
	// lastScan is when each Provider was last scanned for orphans.
	lastScan map[types.UID]time.Time
	// lastOrphans are the orphans each Provider's last scan found: orphanPolicy Delete
	// deletes only those two scans in a row found.
	lastOrphans map[types.UID]map[orphanKey]bool
	// orphansDeleting are the orphans of each Provider whose deletion a backend task is
	// making, recorded as deleted once a scan no longer lists them. A provider restarted
	// meanwhile deletes them all the same, without recording it.
	orphansDeleting map[types.UID]map[orphanKey]MarkedVM
}

// ProviderOption configures a ProviderReconciler.
type ProviderOption func(*ProviderReconciler)

// WithMachineWakeups makes the ProviderReconciler, after each inventory refresh of a
// Provider whose session is a GuestAddressReporter, send on ch the machines of the
// Provider that wait for their guest's address (Ready, with a providerID and powered
// on, but no address) and whose VMs now report one. Setup hands the same channel to the
// machine Reconciler (WithWakeups). A send waits for the receiver, or for ctx to end.
func WithMachineWakeups(ch chan<- event.GenericEvent) ProviderOption {
	return func(r *ProviderReconciler) { r.wakeups = ch }
}

// WithProviderChecks makes the ProviderReconciler also check the Providers sent on ch.
// Setup passes the channel the machine Reconciler wakes a Provider through when a
// machine found its BackendReachable or CredentialsValid condition stale
// (WithProviderWakeups).
func WithProviderChecks(ch <-chan event.GenericEvent) ProviderOption {
	return func(r *ProviderReconciler) { r.checks = ch }
}

// WithMachineReader sets the reader machines are listed from: a cache that carries the
// index IndexMachines adds. SetupWithManager sets the manager's cache; this option is
// for a ProviderReconciler run without one.
func WithMachineReader(reader client.Reader) ProviderOption {
	return func(r *ProviderReconciler) { r.machines = reader }
}

// NewProviderReconciler returns a ProviderReconciler for Providers of class whose
// machines are of kind gvk, connecting through sessions. The inventory is refreshed
// every interval while the backend is healthy, and retried with backoff when it is not.
func NewProviderReconciler(c client.Client, class string, gvk schema.GroupVersionKind, sessions *Sessions, interval time.Duration, opts ...ProviderOption) *ProviderReconciler {
	r := &ProviderReconciler{
		client: c, class: class, gvk: gvk, sessions: sessions, interval: interval,
		backoff:  workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](2*time.Second, interval),
		machines: c, live: c, lastScan: map[types.UID]time.Time{}, lastOrphans: map[types.UID]map[orphanKey]bool{},
		orphansDeleting: map[types.UID]map[orphanKey]MarkedVM{},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Reconcile checks one Provider's backend and writes its status.
func (r *ProviderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			forgetProviderMetrics(req.NamespacedName, r.class)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.claims(p) {
		// Its class may have changed from this one.
		forgetProviderMetrics(req.NamespacedName, r.class)
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Provider", klog.KObj(p)))
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, p)
	}
	if !controllerutil.ContainsFinalizer(p, ProviderFinalizer) {
		before := p.DeepCopy()
		controllerutil.AddFinalizer(p, ProviderFinalizer)
		if err := r.client.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add finalizer: %w", err)
		}
	}

	status := p.Status.DeepCopy()
	status.MachineKind = banlieuev1.MachineKind{APIGroup: r.gvk.Group, Version: r.gvk.Version, Kind: r.gvk.Kind}
	res, err := r.check(ctx, p, status)
	if err == nil {
		status.ObservedGeneration = p.Generation
	}
	recordProviderConditions(req.NamespacedName, r.class, status.Conditions)
	recordProviderOrphans(req.NamespacedName, r.class, status.Orphans)
	return res, errors.Join(err, r.patchStatus(ctx, p, status))
}

// supportedOperations are the operations beyond create, update and delete cl's
// optional interfaces give, for status.supportedOperations.
func supportedOperations(cl Client) []banlieuev1.ProviderOperation {
	var ops []banlieuev1.ProviderOperation
	for _, op := range []struct {
		has bool
		op  banlieuev1.ProviderOperation
	}{
		{is[Adopter](cl), banlieuev1.ProviderOperationAdopt},
		{is[Releaser](cl), banlieuev1.ProviderOperationRetain},
		{is[VMLister](cl), banlieuev1.ProviderOperationListVMs},
		{is[OrphanLister](cl), banlieuev1.ProviderOperationReportOrphans},
	} {
		if op.has {
			ops = append(ops, op.op)
		}
	}
	return ops
}

// is reports whether cl implements the optional interface T.
func is[T any](cl Client) bool {
	_, ok := cl.(T)
	return ok
}

// check connects and reads the inventory into status, and says when to look again.
func (r *ProviderReconciler) check(ctx context.Context, p *banlieuev1.Provider, status *banlieuev1.ProviderStatus) (ctrl.Result, error) {
	set := func(t string, ok bool, reason, message string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, condition(t, s, reason, message, p.Generation))
	}
	if ptr.Deref(p.Spec.Paused, false) {
		set(banlieuev1.ReadyCondition, false, banlieuev1.ProviderPausedReason, "spec.paused is true: no VM is placed, changed or deleted here")
		return ctrl.Result{}, nil
	}
	if r.shard != nil {
		switch _, conflict, err := r.shard.serves(ctx, p); {
		case err != nil:
			return ctrl.Result{}, err
		case conflict != "":
			// Looked at again as often as shards renew, so it is served again soon after
			// the other shard goes or its selector changes.
			set(banlieuev1.ReadyCondition, false, banlieuev1.ProviderShardConflictReason, conflict)
			return ctrl.Result{RequeueAfter: sharding.DefaultRenew}, nil
		}
	}
	notReady := func(reason, message string) (ctrl.Result, error) {
		set(banlieuev1.ReadyCondition, false, reason, message)
		return ctrl.Result{RequeueAfter: r.backoff.When(p.UID)}, nil
	}
	if _, err := p.Namespaces(); err != nil {
		set(banlieuev1.ReadyCondition, false, banlieuev1.ProviderNamespaceSelectorInvalidReason,
			fmt.Sprintf("spec.namespaceSelector does not parse (%s), so no namespace is admitted; fix it", err.Error()))
		return ctrl.Result{}, nil
	}

	var (
		inv       Inventory
		cl        Client
		connected bool
	)
	err := withBackend(ctx, DefaultCallTimeout, func(ctx context.Context) (err error) {
		if cl, err = r.sessions.Connect(ctx, p); err != nil {
			return err
		}
		connected = true
		inv, err = inventoryOf(ctx, cl)
		return err
	})
	if err == nil {
		r.backoff.Forget(p.UID)
		status.FailureDomains = inv.FailureDomains
		status.FailureDomainSummary = failureDomainSummary(inv.FailureDomains)
		status.ProviderIDPrefix = ""
		if ad, ok := cl.(Adopter); ok {
			status.ProviderIDPrefix = ad.ProviderIDPrefix()
		}
		status.SupportedOperations = supportedOperations(cl)
		set(banlieuev1.ProviderBackendReachableCondition, true, banlieuev1.ProviderBackendReachableReason, "")
		set(banlieuev1.ProviderCredentialsValidCondition, true, banlieuev1.ProviderCredentialsValidReason, "")
		set(banlieuev1.ReadyCondition, true, banlieuev1.ProviderReadyReason, "")
		if err := r.wakeGuests(ctx, cl, p); err != nil {
			// The inventory is what the Provider's conditions report; a failed look at the
			// guests only delays addresses until the next refresh.
			ctrl.LoggerFrom(ctx).Info("Failed to find the guests that report an address", "err", redact.Text(err.Error()))
		}
		next, err := r.scanOrphans(ctx, cl, p, status)
		if err != nil {
			// The report stays as the last scan made it, and the scan is retried at the
			// next refresh.
			ctrl.LoggerFrom(ctx).Info("Failed to look for orphaned VMs", "err", redact.Text(err.Error()))
		}
		if next > 0 && next < r.interval {
			return ctrl.Result{RequeueAfter: next}, nil
		}
		return ctrl.Result{RequeueAfter: r.interval}, nil
	}

	var (
		unreach *UnreachableError
		unauth  *UnauthorizedError
		perm    *PermanentError
	)
	switch {
	case errors.Is(err, ErrSessionClosed):
		// A machine's reconcile dropped the session this check was reading with; the next
		// check connects afresh and reports what it finds.
		return ctrl.Result{RequeueAfter: sessionClosedRetry}, nil
	case errors.As(err, &unreach):
		r.sessions.Forget(ctx, p.UID)
		set(banlieuev1.ProviderBackendReachableCondition, false, banlieuev1.ProviderBackendUnreachableReason, unreach.Err.Error())
		set(banlieuev1.ProviderCredentialsValidCondition, false, banlieuev1.ProviderNotCheckedReason, "the backend could not be reached")
		return notReady(banlieuev1.ProviderBackendUnreachableReason, unreach.Err.Error())
	case errors.As(err, &unauth):
		r.sessions.Forget(ctx, p.UID)
		set(banlieuev1.ProviderBackendReachableCondition, true, banlieuev1.ProviderBackendReachableReason, "")
		set(banlieuev1.ProviderCredentialsValidCondition, false, banlieuev1.ProviderCredentialsRejectedReason, unauth.Err.Error())
		return notReady(banlieuev1.ProviderCredentialsRejectedReason, unauth.Err.Error())
	case errors.Is(err, errCredentialsNotFound), errors.Is(err, errCABundleNotFound):
		set(banlieuev1.ProviderBackendReachableCondition, false, banlieuev1.ProviderNotCheckedReason, "the credentials or CA bundle are missing")
		set(banlieuev1.ProviderCredentialsValidCondition, false, banlieuev1.ProviderCredentialsNotFoundReason, err.Error())
		return notReady(banlieuev1.ProviderCredentialsNotFoundReason, err.Error())
	case connected && errors.As(err, &perm):
		// The session opened, so the backend answered and took the credentials; what it
		// refused is the inventory, e.g. for want of a permission or a misspelt parameter.
		set(banlieuev1.ProviderBackendReachableCondition, true, banlieuev1.ProviderBackendReachableReason, "")
		set(banlieuev1.ProviderCredentialsValidCondition, true, banlieuev1.ProviderCredentialsValidReason, "")
		return notReady(banlieuev1.ProviderInventoryFailedReason, perm.Message)
	case errors.As(err, &perm):
		set(banlieuev1.ProviderBackendReachableCondition, false, banlieuev1.ProviderNotCheckedReason, "the credentials are invalid")
		set(banlieuev1.ProviderCredentialsValidCondition, false, banlieuev1.ProviderCredentialsInvalidReason, perm.Message)
		return notReady(banlieuev1.ProviderCredentialsInvalidReason, perm.Message)
	case connected:
		// Connected, but the inventory failed: report it and keep the last failure domains.
		ctrl.LoggerFrom(ctx).Info("Failed to read the inventory", "err", redact.Text(err.Error()))
		return notReady(banlieuev1.ProviderInventoryFailedReason, err.Error())
	default:
		return ctrl.Result{}, err
	}
}

// reconcileDelete holds the Provider until none of its machines is left, then drops
// its session and its finalizer.
func (r *ProviderReconciler) reconcileDelete(ctx context.Context, p *banlieuev1.Provider) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(p)
	if !controllerutil.ContainsFinalizer(p, ProviderFinalizer) {
		forgetProviderMetrics(key, r.class)
		return ctrl.Result{}, nil
	}
	machines, err := machinesOn(ctx, r.machines, r.gvk, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	if n := len(machines); n > 0 {
		names := make([]string, 0, n)
		for i := range machines {
			names = append(names, machines[i].GetNamespace()+"/"+machines[i].GetName())
		}
		slices.Sort(names)
		if len(names) > 5 {
			names = append(names[:5], "…")
		}
		status := p.Status.DeepCopy()
		meta.SetStatusCondition(&status.Conditions, condition(banlieuev1.ReadyCondition, metav1.ConditionFalse, banlieuev1.ProviderDeletionBlockedReason,
			fmt.Sprintf("deletion waits for %d %s still on this Provider (%s); delete or move their VMs", n, r.gvk.Kind, strings.Join(names, ", ")), p.Generation))
		recordProviderConditions(key, r.class, status.Conditions)
		return ctrl.Result{}, r.patchStatus(ctx, p, status)
	}
	r.sessions.Forget(ctx, p.UID)
	r.backoff.Forget(p.UID)
	r.scanned(p.UID, time.Time{})
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, ProviderFinalizer)
	if err := r.client.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("failed to remove finalizer: %w", err))
	}
	forgetProviderMetrics(key, r.class)
	return ctrl.Result{}, nil
}
