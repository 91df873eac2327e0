package virtualmachine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/ownwrites"
)

// FieldManager is the server-side-apply field manager of the core controller.
const FieldManager = "banlieue-core"

// Reconciler reconciles VirtualMachines.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	// SetupWithManager wraps it so that its writes of VMs are recorded (written).
	Client client.Client

	// Recorder records Events on VMs; the manager's recorder when nil.
	Recorder events.EventRecorder
	// Events says which Events are recorded; every one when empty (EventsAll).
	Events EventPolicy
	// Shard is the part of the namespaces this instance serves (see Shard); every
	// namespace, unregistered, when nil.
	Shard *Shard

	mgr        ctrl.Manager
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	controller controller.Controller
	// locations counts the VMs of each location, for placement (load).
	locations *locationLoad

	mu sync.Mutex
	// kinds are the infrastructure machine kinds met so far, each read and watched
	// through its own cache (machineKind).
	kinds map[schema.GroupVersionKind]*machineKind

	metrics vmMetrics
	// written is the resourceVersion of core's last write of each VM, and live reads
	// a VM whose cached copy is older (package ownwrites).
	written *ownwrites.Versions
	live    client.Reader
}

// +kubebuilder:rbac:groups=banlieue.io,resources=virtualmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=virtualmachines/status;virtualmachines/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=banlieue.io,resources=providers;vmclasses;vmimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.banlieue.io,resources=*,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=banlieue-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=banlieue-system,resources=events,verbs=create;patch

// SetupWithManager registers the controller, its field indexes and its static watches
// with mgr. Watches on infrastructure machine kinds are added at run time, as Providers
// publish them.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if err := setupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	locations, err := setupLocationLoad(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	r.locations = locations
	r.readOwnWrites(mgr.GetAPIReader())
	r.mgr = mgr
	r.scheme = mgr.GetScheme()
	r.mapper = mgr.GetRESTMapper()
	r.kinds = map[schema.GroupVersionKind]*machineKind{}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("banlieue-core")
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&banlieuev1.VirtualMachine{}).
		Watches(&banlieuev1.VMClass{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsing(indexClass))).
		Watches(&banlieuev1.VMImage{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsing(indexImage))).
		Watches(&banlieuev1.Provider{}, handler.EnqueueRequestsFromMapFunc(r.vmsAffectedByProvider),
			builder.WithPredicates(providerChanged())).
		WithOptions(options).
		Build(r)
	if err != nil {
		return fmt.Errorf("failed to build the VirtualMachine controller: %w", err)
	}
	r.controller = c
	return nil
}

// Reconcile moves one VirtualMachine towards its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if serve, result, err := r.sharded(ctx, req.Namespace); !serve {
		return result, err
	}
	vm := &banlieuev1.VirtualMachine{}
	if _, err := r.written.Get(ctx, r.Client, r.live, req.NamespacedName, vm); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forgetName(req.NamespacedName)
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vm.Status.Scheduled.IsDefined() {
		ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Provider", klog.KRef(vm.Status.Scheduled.ProviderNamespace, vm.Status.Scheduled.ProviderName)))
	}
	if !vm.DeletionTimestamp.IsZero() {
		return r.withStatus(ctx, vm, r.reconcileDelete)
	}
	if !controllerutil.ContainsFinalizer(vm, banlieuev1.VirtualMachineFinalizer) {
		before := vm.DeepCopy()
		controllerutil.AddFinalizer(vm, banlieuev1.VirtualMachineFinalizer)
		if err := r.Client.Patch(ctx, vm, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add finalizer: %w", err)
		}
	}
	if ptr.Deref(vm.Spec.Paused, false) {
		ctrl.LoggerFrom(ctx).V(4).Info("VirtualMachine is paused")
		return r.withStatus(ctx, vm, r.reconcilePaused)
	}
	return r.withStatus(ctx, vm, r.reconcileNormal)
}

// readOwnWrites makes the Reconciler read a VM from live when its cached copy is older
// than core's own last write of it. A machine's progress wakes its VM at once (see
// virtualmachine_priority.go), often before the watch has brought back the status core
// wrote a moment earlier; reconciling that older copy wrote the same step again, with a
// new lastTransitionTime: at 10,000 VMs, nearly one status write more per VM deleted.
func (r *Reconciler) readOwnWrites(live client.Reader) {
	r.written = ownwrites.New()
	r.live = live
	r.Client = ownwrites.NewClient(r.Client, r.written, func(o client.Object) bool {
		_, ok := o.(*banlieuev1.VirtualMachine)
		return ok
	})
}

// withStatus runs phase, then computes the VM's phase and Ready condition and patches
// its status once, only when it changed. Events and metrics follow the status as
// stored, so a write that failed reports nothing until it is retried.
func (r *Reconciler) withStatus(ctx context.Context, vm *banlieuev1.VirtualMachine, phase func(context.Context, *scope) error) (ctrl.Result, error) {
	s := &scope{vm: vm, before: vm.DeepCopy()}
	// patchStatus replaces s.before rather than changing it, so stored keeps the status
	// this reconcile started from.
	stored := s.before
	err := phase(ctx, s)
	summarize(s)
	if err == nil && !s.paused {
		vm.Status.ObservedGeneration = vm.Generation
	}
	steps := lifecycleEvents(stored, vm)
	// A reconcile that reports a step writes only over the status it read: one working
	// from a cache that has not seen the write that took the step already fails here,
	// instead of reporting the step a second time.
	perr := r.patchStatus(ctx, s, len(steps) > 0)
	if perr != nil {
		err = errors.Join(err, perr)
	} else if !s.released {
		for _, e := range steps {
			r.event(vm, e.eventType, e.reason, e.action, "%s", e.note)
			if e.reason == banlieuev1.VirtualMachineRestartedReason {
				VirtualMachineRestarts.WithLabelValues(locationOf(vm).ProviderKey()).Inc()
			}
		}
	}
	if s.released {
		r.metrics.forget(vm.UID)
		r.written.Forget(client.ObjectKeyFromObject(vm))
	} else {
		r.metrics.record(s.before)
		r.metrics.observeReady(stored, s.before)
	}
	if apierrors.IsConflict(err) {
		// The cache is behind a write; the watch event that catches it up requeues too.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, err
}

// patchStatus writes the VM's status when it changed. With lock, the write fails when
// the VM changed since it was read, so a decision taken on a stale copy is never stored.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, lock bool) error {
	if s.released || equality.Semantic.DeepEqual(s.before.Status, s.vm.Status) {
		return nil
	}
	var opts []client.MergeFromOption
	if lock {
		opts = append(opts, client.MergeFromWithOptimisticLock{})
	}
	if err := r.Client.Status().Patch(ctx, s.vm, client.MergeFromWithOptions(s.before, opts...)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("failed to patch VirtualMachine status: %w", err)
	}
	s.before = s.vm.DeepCopy()
	return nil
}

// event records an Event on the VM. Every Event of core goes through here: its note is
// redacted and cut to what the API server accepts (eventNote).
func (r *Reconciler) event(vm *banlieuev1.VirtualMachine, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil && r.Events.records(eventType, reason) {
		r.Recorder.Eventf(vm, nil, eventType, reason, action, "%s", eventNote(note, args...))
	}
}

// sharded reports whether this instance acts on the VMs of namespace now (see Shard);
// when not, the result to return: nothing for another shard's namespace, a look again
// soon for one held back.
func (r *Reconciler) sharded(ctx context.Context, namespace string) (bool, ctrl.Result, error) {
	if r.Shard == nil {
		return true, ctrl.Result{}, nil
	}
	// Read even without a selector of its own: another shard's may need them.
	nsLabels, err := r.namespaceLabels(ctx, namespace)
	if err != nil {
		return false, ctrl.Result{}, client.IgnoreNotFound(err)
	}
	d, why, err := r.Shard.decide(ctx, namespace, nsLabels)
	switch {
	case err != nil:
		return false, ctrl.Result{}, err
	case d == hold:
		r.Shard.logHold(ctx, namespace, why)
		return false, ctrl.Result{RequeueAfter: r.Shard.registry.Recheck()}, nil
	}
	r.Shard.logHold(ctx, namespace, "")
	return d == serve, ctrl.Result{}, nil
}

// namespaceLabels returns the labels of a namespace: the cache's own map, not a copy,
// which placement only matches and nothing may change.
func (r *Reconciler) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, ns, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to get namespace %s: %w", name, err)
	}
	return ns.Labels, nil
}
