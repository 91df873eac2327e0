package providersdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/ownwrites"
	"github.com/banlieue/banlieue/pkg/redact"
)

// Reconciler reconciles the infrastructure machines of one kind through a Driver.
type Reconciler struct {
	client client.Client
	reader client.Reader
	// machines is the cache machines are read from (readMachine) and a Provider's
	// machines listed from, through the MachineProviderField index: the manager's,
	// once set up.
	machines client.Reader
	// live reads a machine the cache is behind on (written); the manager's API reader.
	live    client.Reader
	written *ownwrites.Versions
	// capi is where Cluster API's Machines and Clusters are read from: the manager's
	// cache when they are watched (capiWatched), the API server otherwise.
	capi        client.Reader
	capiWatched bool
	// namespace and watchFilter restrict the machines reconciled (WithWatchScope).
	namespace, watchFilter string
	// shard is the part of the class's Providers served (WithShard); all when nil.
	shard *Shard

	gvk         schema.GroupVersionKind
	class       string
	finalizer   string
	sessions    *Sessions
	statusBlock string
	callTimeout time.Duration
	workers     int
	// admitter is the driver's check of its machines' own block; nil when it has none.
	admitter Admitter

	inFlight    workqueue.TypedRateLimiter[types.UID]
	unreachable workqueue.TypedRateLimiter[types.UID]
	guest       workqueue.TypedRateLimiter[types.UID]
	guestWindow workqueue.TypedRateLimiter[types.UID]
	// looks serves the guest window's looks from one answer per Provider.
	looks       *guestLooks
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
	// unrecorded keeps new tasks out of the machines' status for a moment
	// (WithTaskRecordDelay); nil records every task at once.
	unrecorded *unrecordedTasks
}

// Finalizer returns the finalizer the Reconciler owns on its machines.
func (r *Reconciler) Finalizer() string { return r.finalizer }

// Workers returns how many machines the Reconciler reconciles at once (WithWorkers).
func (r *Reconciler) Workers() int { return r.workers }

// Reconcile brings one machine's backend VM in line with its spec: get, finalizer,
// pause, the Provider, admission, then reconcileNormal or reconcileDelete against the
// Provider's session, and one status patch at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.namespace != "" && req.Namespace != r.namespace {
		return ctrl.Result{}, nil // another provider process's, whatever woke it
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	if err := r.readMachine(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.tasks.forgetName(req.NamespacedName)
			r.unrecorded.forget(req.NamespacedName)
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.filtered(u) { // the namespace was checked above
		return ctrl.Result{}, nil
	}
	if serves, err := r.servesProviderOf(ctx, u); !serves || err != nil {
		return ctrl.Result{}, err // another shard's, or none's while shards conflict on it
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues(r.gvk.Kind, klog.KObj(u)))
	deleting := !u.GetDeletionTimestamp().IsZero()
	if !controllerutil.ContainsFinalizer(u, r.finalizer) {
		if deleting {
			r.tasks.set(u.GetUID(), req.NamespacedName, false)
			return ctrl.Result{}, nil
		}
		if err := r.addFinalizer(ctx, u); err != nil {
			return ctrl.Result{}, err
		}
	}
	s, err := newScope(u)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.unrecorded.restore(s, r.statusBlock); err != nil {
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Provider", klog.KRef(s.machine.Spec.ProviderRef.Namespace, s.machine.Spec.ProviderRef.Name))
	ctx = ctrl.LoggerInto(ctx, log)
	// Every return below leaves s.status as stored or as just written. A failed write
	// counts what was meant; its retry corrects the count. A machine whose finalizer
	// was removed no longer counts.
	defer func() {
		r.tasks.set(u.GetUID(), req.NamespacedName, s.status.Task.IsDefined() && controllerutil.ContainsFinalizer(u, r.finalizer))
	}()
	if why := machinePaused(u); why != "" {
		return ctrl.Result{}, r.pause(ctx, s, why)
	}
	// Nil, and read from nothing, for a machine Cluster API does not manage.
	capi, cerr := r.readClusterAPI(ctx, u)
	if cerr != nil {
		if !deleting {
			return ctrl.Result{}, cerr
		}
		// Deleting never waits on Cluster API: its objects unreadable (access revoked,
		// say), the VM goes without the Cluster's pause or the Machine's placement.
		log.Info("Deleting without Cluster API's objects, which cannot be read", "err", redact.Text(cerr.Error()))
	}
	if why := capi.paused(); why != "" {
		return ctrl.Result{}, r.pause(ctx, s, why)
	}

	p := &banlieuev1.Provider{}
	ref := s.machine.Spec.ProviderRef
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, p); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("failed to get Provider: %w", err)
		}
		if deleting {
			// With its Provider gone the backend can no longer be reached through banlieue;
			// holding the machine forever would block the VM, so it is released.
			log.Info("Provider is gone; releasing the machine without deleting a backend VM")
			return ctrl.Result{}, r.removeFinalizer(ctx, u)
		}
		s.setPaused("")
		s.ready(metav1.ConditionFalse, infrav1.MachineProviderNotFoundReason, fmt.Sprintf("Provider %s/%s not found", ref.Namespace, ref.Name))
		return ctrl.Result{}, r.patchStatus(ctx, s)
	}
	if ptr.Deref(p.Spec.Paused, false) {
		return ctrl.Result{}, r.pause(ctx, s, fmt.Sprintf("Provider %s/%s is paused (spec.paused)", p.Namespace, p.Name))
	}
	s.setPaused("")

	// Deleting never waits, nor does a machine whose VM exists or is being made: it is
	// observed as usual.
	if !deleting && s.machine.Spec.ProviderID == "" && !s.machine.Task.InFlight() {
		if reason, message := capi.waiting(); reason != "" {
			log.V(4).Info("Waiting for Cluster API", "reason", reason)
			s.setFailure("", "")
			s.ready(metav1.ConditionFalse, reason, message)
			return ctrl.Result{RequeueAfter: r.waitRequeue()}, r.patchStatus(ctx, s)
		}
	}
	s.bootstrapFrom = capi.apply(s.machine)

	if !deleting {
		if wait := r.held(s.machine); wait > 0 {
			log.V(4).Info("Waiting before retrying a failed task", "after", wait.String())
			return ctrl.Result{RequeueAfter: wait}, r.patchStatus(ctx, s)
		}
		// Deleting is never refused: whatever a machine asked for, its VM may go.
		err = r.admit(ctx, p, s.machine)
	}
	if err == nil {
		err = withBackend(ctx, r.callTimeout, func(ctx context.Context) error {
			cl, err := r.sessions.Session(ctx, p)
			if err != nil {
				return err
			}
			if s.machine.ClusterID, err = r.sessions.ClusterID(ctx); err != nil {
				return err
			}
			reporter, reports := cl.(GuestAddressReporter)
			s.guestsReported = reports
			if deleting {
				return r.reconcileDelete(ctx, cl, s)
			}
			if reports && r.looks.lookOnly(s) {
				has, err := r.looks.reports(ctx, p.UID, reporter, s.machine.Spec.ProviderID)
				if err != nil || !has {
					s.waitingForGuest = err == nil
					return err
				}
			}
			return r.reconcileNormal(ctx, cl, p, s)
		})
	}
	if errors.Is(err, errGone) {
		return ctrl.Result{}, r.removeFinalizer(ctx, u)
	}
	res, err := r.classify(ctx, p, s, err)
	if r.unrecorded.hold(s, time.Now()) {
		return res, err
	}
	if perr := r.patchStatus(ctx, s); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return res, err
}

// pause records in the machine's status that the provider leaves it alone, and why.
func (r *Reconciler) pause(ctx context.Context, s *scope, why string) error {
	ctrl.LoggerFrom(ctx).V(4).Info("Machine is paused", "why", why)
	s.setPaused(why)
	return r.patchStatus(ctx, s)
}

// machinePaused says why the machine is paused by its own annotations (Cluster API's,
// or the one core sets for a paused VirtualMachine); "" when it is not.
func machinePaused(u *unstructured.Unstructured) string {
	a := u.GetAnnotations()
	if _, ok := a[PausedAnnotation]; ok {
		return "the machine carries the annotation " + PausedAnnotation
	}
	if _, ok := a[infrav1.PausedAnnotation]; ok {
		return "its VirtualMachine is paused (spec.paused)"
	}
	return ""
}

// PausedAnnotation pauses the reconciliation of a machine that carries it (Cluster API's).
const PausedAnnotation = "cluster.x-k8s.io/paused"

// providerOf returns the machine's spec.providerRef as an object key; false when the
// machine names no Provider.
// servesProviderOf reports whether the Reconciler's shard serves the machine u's
// Provider (WithShard). A machine whose Provider does not exist is every shard's: its
// status says so, the same from each, and its deletion needs no backend.
func (r *Reconciler) servesProviderOf(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	ref, ok := providerOf(u)
	if r.shard == nil || !ok {
		return true, nil
	}
	p := &banlieuev1.Provider{}
	if err := r.client.Get(ctx, ref, p); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	serves, _, err := r.shard.serves(ctx, p)
	return serves, err
}

func providerOf(o client.Object) (types.NamespacedName, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return types.NamespacedName{}, false
	}
	ref := contract.ProviderRef(u)
	return types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ref.Namespace != "" && ref.Name != ""
}
