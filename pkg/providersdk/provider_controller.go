package providersdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
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

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
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

// NewProviderReconciler returns a ProviderReconciler for Providers of class whose
// machines are of kind gvk, connecting through sessions. The inventory is refreshed
// every interval while the backend is healthy, and retried with backoff when it is not.
func NewProviderReconciler(c client.Client, class string, gvk schema.GroupVersionKind, sessions *Sessions, interval time.Duration, opts ...ProviderOption) *ProviderReconciler {
	r := &ProviderReconciler{
		client: c, class: class, gvk: gvk, sessions: sessions, interval: interval,
		backoff:  workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](2*time.Second, interval),
		machines: c,
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// SetupWithManager registers the ProviderReconciler with mgr. It watches the Providers
// of its class and the machines of its kind, so a Provider being deleted lets go as
// soon as its last machine is gone, and the Providers machines wake; the machines to
// wake are read from mgr's cache.
func (r *ProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.machines = mgr.GetCache()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	b := ctrl.NewControllerManagedBy(mgr).
		// Its own status writes change neither the generation nor the annotations; waking
		// on them would read the inventory again after every change of the conditions.
		For(&banlieuev1.Provider{}, builder.WithPredicates(predicate.NewPredicateFuncs(r.claims),
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// Only a machine's removal can release a Provider being deleted.
		Watches(u, handler.EnqueueRequestsFromMapFunc(r.deletingProviderOf), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		}))
	if r.checks != nil {
		b = b.WatchesRawSource(source.Channel(r.checks, &handler.EnqueueRequestForObject{}))
	}
	return b.Named(r.class + "-provider").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// claims reports whether o is a Provider of the reconciler's class.
func (r *ProviderReconciler) claims(o client.Object) bool {
	p, ok := o.(*banlieuev1.Provider)
	return ok && p.Spec.ProviderClassRef.Name == r.class
}

// providerRefOf returns the Provider a machine names in spec.providerRef.
func providerRefOf(o client.Object) (types.NamespacedName, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, _, _ := unstructured.NestedString(u.Object, "spec", "providerRef", "namespace")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "providerRef", "name")
	return types.NamespacedName{Namespace: ns, Name: name}, ns != "" && name != ""
}

// deletingProviderOf maps a machine to its Provider when that Provider is being deleted.
// A Provider that is not has nothing to do when a machine goes: waking it would read
// its inventory again for every VM of a mass deletion.
func (r *ProviderReconciler) deletingProviderOf(ctx context.Context, o client.Object) []reconcile.Request {
	ref, ok := providerRefOf(o)
	if !ok {
		return nil
	}
	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, ref, p); err != nil || p.DeletionTimestamp.IsZero() {
		return nil // a Provider that is gone has no finalizer left to release
	}
	return []reconcile.Request{{NamespacedName: ref}}
}

// machinesOn lists the machines of kind gvk whose providerRef names the Provider p.
func machinesOn(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, p client.Object, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", gvk.Kind, err)
	}
	want := client.ObjectKeyFromObject(p)
	var on []unstructured.Unstructured
	for i := range list.Items {
		if ref, ok := providerRefOf(&list.Items[i]); ok && ref == want {
			on = append(on, list.Items[i])
		}
	}
	return on, nil
}

// Reconcile checks one Provider's backend and writes its status.
func (r *ProviderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.claims(p) {
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
	status.MachineKind = &banlieuev1.MachineKind{APIGroup: r.gvk.Group, Version: r.gvk.Version, Kind: r.gvk.Kind}
	res, err := r.check(ctx, p, status)
	if err == nil {
		status.ObservedGeneration = p.Generation
	}
	return res, errors.Join(err, r.patchStatus(ctx, p, status))
}

// check connects and reads the inventory into status, and says when to look again.
func (r *ProviderReconciler) check(ctx context.Context, p *banlieuev1.Provider, status *banlieuev1.ProviderStatus) (ctrl.Result, error) {
	set := func(t string, ok bool, reason, message string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: p.Generation})
	}
	if p.Spec.Paused {
		set(banlieuev1.ReadyCondition, false, banlieuev1.ProviderPausedReason, "spec.paused is true: no VM is placed, changed or deleted here")
		return ctrl.Result{}, nil
	}
	notReady := func(reason, message string) (ctrl.Result, error) {
		set(banlieuev1.ReadyCondition, false, reason, message)
		return ctrl.Result{RequeueAfter: r.backoff.When(p.UID)}, nil
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
		inv, err = cl.Inventory(ctx)
		return err
	})
	if err == nil {
		r.backoff.Forget(p.UID)
		status.FailureDomains = inv.FailureDomains
		status.FailureDomainSummary = failureDomainSummary(inv.FailureDomains)
		set(banlieuev1.ProviderBackendReachableCondition, true, banlieuev1.ProviderBackendReachableReason, "")
		set(banlieuev1.ProviderCredentialsValidCondition, true, banlieuev1.ProviderCredentialsValidReason, "")
		set(banlieuev1.ReadyCondition, true, banlieuev1.ProviderReadyReason, "")
		if err := r.wakeGuests(ctx, cl, p); err != nil {
			// The inventory is what the Provider's conditions report; a failed look at the
			// guests only delays addresses until the next refresh.
			ctrl.LoggerFrom(ctx).Info("Failed to find the guests that report an address", "err", err.Error())
		}
		return ctrl.Result{RequeueAfter: r.interval}, nil
	}

	var (
		unreach *UnreachableError
		unauth  *UnauthorizedError
		perm    *PermanentError
	)
	switch {
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
		ctrl.LoggerFrom(ctx).Error(err, "Failed to read the inventory")
		return notReady(banlieuev1.ProviderInventoryFailedReason, err.Error())
	default:
		return ctrl.Result{}, err
	}
}

// wakeGuests wakes the Provider's machines that wait for their guest's address and whose
// VMs now report one. It asks the session, in one GuestsWithAddresses call for the whole
// Provider, only when some machine waits: a Provider whose running machines all have
// their addresses costs the backend nothing here. The machines are read from the cache.
func (r *ProviderReconciler) wakeGuests(ctx context.Context, cl Client, p *banlieuev1.Provider) error {
	reporter, ok := cl.(GuestAddressReporter)
	if !ok || r.wakeups == nil {
		return nil
	}
	// Read-only: the machines are not changed, and an event only carries their names.
	machines, err := machinesOn(ctx, r.machines, r.gvk, p, client.UnsafeDisableDeepCopy)
	if err != nil {
		return err
	}
	waiting := map[string]*unstructured.Unstructured{}
	for i := range machines {
		if id := waitingForAddress(&machines[i]); id != "" {
			waiting[id] = &machines[i]
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	var reporting map[string]bool
	if err := withBackend(ctx, DefaultCallTimeout, func(ctx context.Context) (err error) {
		reporting, err = reporter.GuestsWithAddresses(ctx)
		return err
	}); err != nil {
		return err
	}
	woken := 0
	for id, m := range waiting {
		if !reporting[id] {
			continue
		}
		select {
		case r.wakeups <- event.GenericEvent{Object: m}:
			woken++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Woke machines whose guests report an address", "waiting", len(waiting), "woken", woken)
	return nil
}

// waitingForAddress returns the providerID of a machine that waits for its guest's
// address: not being deleted, Ready, powered on and with a providerID, but without an
// address; "" for any other machine.
func waitingForAddress(u *unstructured.Unstructured) string {
	id := contract.ProviderID(u)
	if id == "" || u.GetDeletionTimestamp() != nil {
		return ""
	}
	status, err := contract.Status(u)
	if err != nil || len(status.Addresses) > 0 || status.PowerState != banlieuev1.PowerStatePoweredOn ||
		!meta.IsStatusConditionTrue(status.Conditions, banlieuev1.ReadyCondition) {
		return ""
	}
	return id
}

// failureDomainSummary is status.failureDomainSummary for domains: up to three names
// in at most 64 characters (the first always, cut with "…" when longer), then
// "(+N more)" for the rest.
func failureDomainSummary(domains []banlieuev1.FailureDomain) string {
	const maxNames, maxLen = 3, 64
	names := make([]string, 0, maxNames)
	width := 0 // characters of the names and the separators between them
	for _, d := range domains {
		name := d.Name
		if len(names) == 0 && utf8.RuneCountInString(name) > maxLen {
			name = string([]rune(name)[:maxLen-1]) + "…"
		}
		w := utf8.RuneCountInString(name)
		if len(names) > 0 {
			w += len(", ")
		}
		if len(names) == maxNames || len(names) > 0 && width+w > maxLen {
			break
		}
		names = append(names, name)
		width += w
	}
	summary := strings.Join(names, ", ")
	if more := len(domains) - len(names); more > 0 {
		summary += fmt.Sprintf(" (+%d more)", more)
	}
	return summary
}

// reconcileDelete holds the Provider until none of its machines is left, then drops
// its session and its finalizer.
func (r *ProviderReconciler) reconcileDelete(ctx context.Context, p *banlieuev1.Provider) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, ProviderFinalizer) {
		return ctrl.Result{}, nil
	}
	machines, err := machinesOn(ctx, r.client, r.gvk, p)
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
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: banlieuev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: banlieuev1.ProviderDeletionBlockedReason, ObservedGeneration: p.Generation,
			Message: fmt.Sprintf("deletion waits for %d %s still on this Provider (%s); delete or move their VMs", n, r.gvk.Kind, strings.Join(names, ", ")),
		})
		return ctrl.Result{}, r.patchStatus(ctx, p, status)
	}
	r.sessions.Forget(ctx, p.UID)
	r.backoff.Forget(p.UID)
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, ProviderFinalizer)
	if err := r.client.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("failed to remove finalizer: %w", err))
	}
	return ctrl.Result{}, nil
}

// patchStatus writes status when it differs from the Provider's.
func (r *ProviderReconciler) patchStatus(ctx context.Context, p *banlieuev1.Provider, status *banlieuev1.ProviderStatus) error {
	if equality.Semantic.DeepEqual(&p.Status, status) {
		return nil
	}
	before := p.DeepCopy()
	p.Status = *status
	if err := r.client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to patch Provider status: %w", err))
	}
	return nil
}
