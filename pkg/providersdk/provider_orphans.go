package providersdk

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
)

// maxOrphansNamed is how many orphaned VMs status.orphans.vms names.
const maxOrphansNamed = 5

// WithOrphanScan makes the ProviderReconciler look for orphaned VMs, on a Provider whose
// session is an OrphanLister, at most every interval (every reconcile when zero).
// Setup sets Config.OrphanScanInterval, 10m when zero; without this option no scan is
// made.
func WithOrphanScan(interval time.Duration) ProviderOption {
	return func(r *ProviderReconciler) { r.orphanScan = &interval }
}

// WithProviderShard restricts the Providers the ProviderReconciler serves to those shard
// matches, and makes it report one that another live shard matches too as Ready=False,
// reason ShardConflict, and leave it alone; Setup passes the process's shard.
func WithProviderShard(shard *Shard) ProviderOption {
	return func(r *ProviderReconciler) { r.shard = shard }
}

// WithEventRecorder sets the recorder of the Events the ProviderReconciler records on a
// Provider (OrphanDeleted); Setup passes the manager's. None is recorded without it.
func WithEventRecorder(recorder events.EventRecorder) ProviderOption {
	return func(r *ProviderReconciler) { r.recorder = recorder }
}

// WithAPIReader sets the uncached reader a machine that an orphan's mark names is
// confirmed gone with; SetupWithManager's caller, Setup, passes the manager's API
// reader. The ProviderReconciler's client is used without it.
func WithAPIReader(reader client.Reader) ProviderOption {
	return func(r *ProviderReconciler) { r.live = reader }
}

// orphanScanDue reports whether the Provider with uid is due an orphan scan at now, and
// when, otherwise, the next one is.
func (r *ProviderReconciler) orphanScanDue(uid types.UID, now time.Time) (bool, time.Duration) {
	if r.orphanScan == nil {
		return false, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last, scanned := r.lastScan[uid]
	if !scanned || now.Sub(last) >= *r.orphanScan {
		return true, *r.orphanScan
	}
	return false, *r.orphanScan - now.Sub(last)
}

// scanned records that the Provider with uid was scanned at t; a zero t forgets it.
func (r *ProviderReconciler) scanned(uid types.UID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.IsZero() {
		delete(r.lastScan, uid)
		return
	}
	r.lastScan[uid] = t
}

// scanOrphans lists the backend's marked VMs through cl, when it is an OrphanLister and
// the Provider is due a scan, and writes those whose machine is gone into
// status.Orphans. It returns when to look again (0 when never); on an error the last
// report stays.
func (r *ProviderReconciler) scanOrphans(ctx context.Context, cl Client, p *banlieuev1.Provider, status *banlieuev1.ProviderStatus) (time.Duration, error) {
	lister, ok := cl.(OrphanLister)
	if !ok {
		status.Orphans = banlieuev1.ProviderOrphans{}
		return 0, nil
	}
	now := time.Now()
	due, next := r.orphanScanDue(p.UID, now)
	if !due {
		return next, nil
	}
	var marked []MarkedVM
	if err := withBackend(ctx, DefaultCallTimeout, func(ctx context.Context) (err error) {
		marked, err = lister.ListMarked(ctx)
		return err
	}); err != nil {
		return next, fmt.Errorf("failed to list the backend's marked VMs: %w", err)
	}
	clusterID, err := r.sessions.ClusterID(ctx)
	if err != nil {
		return next, err
	}
	orphans, err := r.orphansOf(ctx, marked, clusterID)
	if err != nil {
		return next, err
	}
	r.scanned(p.UID, now)
	r.orphansGone(ctx, p, marked)
	previous := r.rememberOrphans(p.UID, orphans)
	if p.Spec.OrphanPolicy == banlieuev1.OrphanPolicyDelete {
		orphans = r.deleteOrphans(ctx, cl, p, orphans, func(vm MarkedVM) bool {
			return clusterID != "" && vm.ClusterID == clusterID && !vm.Adopted && previous[keyOf(vm)]
		})
	}
	status.Orphans = orphanReport(orphans)
	return next, nil
}

// orphansOf returns the VMs of marked whose machine UID no machine of the kind has in
// any namespace (read from the cache), each confirmed by a live GET of the machine its
// mark names, when it names one. A VM whose mark names another cluster than clusterID
// is that cluster's to report, not an orphan here.
func (r *ProviderReconciler) orphansOf(ctx context.Context, marked []MarkedVM, clusterID string) ([]MarkedVM, error) {
	if len(marked) == 0 {
		return nil, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.machines.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", r.gvk.Kind, err)
	}
	// A machine being deleted keeps its UID here until its finalizer goes, so its VM,
	// which its deletion is removing, is not an orphan.
	known := make(map[types.UID]bool, len(list.Items))
	for i := range list.Items {
		known[list.Items[i].GetUID()] = true
	}
	var orphans []MarkedVM
	for _, vm := range marked {
		if vm.MachineUID == "" || known[vm.MachineUID] || (vm.ClusterID != "" && vm.ClusterID != clusterID) {
			continue
		}
		if vm.Machine.Name != "" {
			// The cache may lag a machine just created: ask the API server.
			m := &unstructured.Unstructured{}
			m.SetGroupVersionKind(r.gvk)
			err := r.live.Get(ctx, vm.Machine, m)
			switch {
			case err == nil && m.GetUID() == vm.MachineUID:
				continue
			case err != nil && !apierrors.IsNotFound(err):
				return nil, fmt.Errorf("failed to get %s %s: %w", r.gvk.Kind, vm.Machine, err)
			}
		}
		orphans = append(orphans, vm)
	}
	return orphans, nil
}

// orphanKey tells one orphan from another between two scans: its VM and the machine its
// mark names.
type orphanKey struct {
	providerID string
	machine    types.UID
}

func keyOf(vm MarkedVM) orphanKey {
	return orphanKey{providerID: vm.ProviderID, machine: vm.MachineUID}
}

// rememberOrphans records the orphans the Provider with uid has now and returns those
// its previous scan found.
func (r *ProviderReconciler) rememberOrphans(uid types.UID, orphans []MarkedVM) map[orphanKey]bool {
	now := make(map[orphanKey]bool, len(orphans))
	for _, vm := range orphans {
		now[keyOf(vm)] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	previous := r.lastOrphans[uid]
	r.lastOrphans[uid] = now
	return previous
}

// deleteOrphans deletes, under orphanPolicy Delete, the orphans deletable allows, and
// returns the orphans left: those it may not delete, and those whose deletion failed or
// is still running on the backend (the next scan takes them up again).
func (r *ProviderReconciler) deleteOrphans(ctx context.Context, cl Client, p *banlieuev1.Provider, orphans []MarkedVM, deletable func(MarkedVM) bool) []MarkedVM {
	var left []MarkedVM
	for _, vm := range orphans {
		if !deletable(vm) {
			left = append(left, vm)
			continue
		}
		gone, err := DeleteOrphan(ctx, cl, infrav1.ProviderRef{Namespace: p.Namespace, Name: p.Name}, vm)
		switch {
		case err != nil:
			ctrl.LoggerFrom(ctx).Info("Failed to delete an orphaned VM", "providerID", vm.ProviderID, "err", redact.Text(err.Error()))
			left = append(left, vm)
		case !gone:
			// A backend task deletes it: the scan that no longer lists it records it.
			r.mu.Lock()
			if r.orphansDeleting[p.UID] == nil {
				r.orphansDeleting[p.UID] = map[orphanKey]MarkedVM{}
			}
			r.orphansDeleting[p.UID][keyOf(vm)] = vm
			r.mu.Unlock()
			left = append(left, vm)
		default:
			r.orphanDeleted(ctx, p, vm)
		}
	}
	return left
}

// orphansGone records as deleted the orphans whose deletion a backend task made and
// that marked, the scan's listing, no longer holds.
func (r *ProviderReconciler) orphansGone(ctx context.Context, p *banlieuev1.Provider, marked []MarkedVM) {
	listed := make(map[orphanKey]bool, len(marked))
	for _, vm := range marked {
		listed[keyOf(vm)] = true
	}
	var gone []MarkedVM
	r.mu.Lock()
	for k, vm := range r.orphansDeleting[p.UID] {
		if !listed[k] {
			gone = append(gone, vm)
			delete(r.orphansDeleting[p.UID], k)
		}
	}
	r.mu.Unlock()
	for _, vm := range gone {
		r.orphanDeleted(ctx, p, vm)
	}
}

// orphanDeleted logs, counts and records as an Event on p that vm was deleted.
func (r *ProviderReconciler) orphanDeleted(ctx context.Context, p *banlieuev1.Provider, vm MarkedVM) {
	ctrl.LoggerFrom(ctx).Info("Deleted an orphaned VM", "providerID", vm.ProviderID, "machineUID", vm.MachineUID)
	ProviderOrphansDeleted.WithLabelValues(r.class, client.ObjectKeyFromObject(p).String()).Inc()
	if r.recorder != nil {
		r.recorder.Eventf(p, nil, corev1.EventTypeNormal, banlieuev1.ProviderOrphanDeletedReason, "DeleteOrphan",
			"Deleted backend VM %s (%s), whose machine %s is gone (spec.orphanPolicy Delete)", vm.ProviderID, vm.Name, orphanMachine(vm))
	}
}

// DeleteOrphan takes one step of deleting vm, an orphan ListMarked reported on the
// Provider ref names, through cl, as the deletion of the machine its mark names would:
// Observe, with a deleting Machine made from the mark, then Delete. It reports whether
// the VM is gone; a Delete that started a task leaves the VM there until a later call
// finds it gone. Observe must report the very VM the listing did: one it reports under
// another provider ID is an error, and nothing is deleted. The ProviderReconciler calls
// it once per orphan scan under spec.orphanPolicy Delete; drivertest checks it.
func DeleteOrphan(ctx context.Context, cl Client, ref infrav1.ProviderRef, vm MarkedVM) (gone bool, err error) {
	m := &Machine{UID: vm.MachineUID, Namespace: vm.Machine.Namespace, Name: vm.Machine.Name, Deleting: true, ClusterID: vm.ClusterID,
		Spec: infrav1.MachineSpec{ProviderRef: ref, ProviderID: vm.ProviderID}}
	err = withBackend(ctx, DefaultCallTimeout, func(ctx context.Context) error {
		obs, err := cl.Observe(ctx, m)
		switch {
		case err != nil:
			return err
		case !obs.Exists:
			gone = true
			return nil
		case obs.ProviderID != vm.ProviderID:
			return fmt.Errorf("the VM of machine %s is now %s, not %s; it is left alone", vm.MachineUID, obs.ProviderID, vm.ProviderID)
		case obs.Task.InFlight():
			return nil
		}
		res, err := cl.Delete(ctx, m, obs)
		if err != nil || res.Task.InFlight() {
			return err
		}
		obs, err = cl.Observe(ctx, m)
		gone = err == nil && !obs.Exists
		return err
	})
	return gone, err
}

// orphanMachine names the machine an orphan's mark names: "<namespace>/<name>/<uid>",
// or its UID alone when the mark names no more.
func orphanMachine(vm MarkedVM) string {
	if vm.Machine.Name == "" {
		return string(vm.MachineUID)
	}
	return vm.Machine.Namespace + "/" + vm.Machine.Name + "/" + string(vm.MachineUID)
}

// orphanReport is status.orphans for orphans: their count and the first of them by
// providerID; zero when there is none.
func orphanReport(orphans []MarkedVM) banlieuev1.ProviderOrphans {
	if len(orphans) == 0 {
		return banlieuev1.ProviderOrphans{}
	}
	slices.SortFunc(orphans, func(a, b MarkedVM) int {
		return cmp.Or(cmp.Compare(a.ProviderID, b.ProviderID), cmp.Compare(a.Name, b.Name))
	})
	report := banlieuev1.ProviderOrphans{Count: int32(min(len(orphans), 1<<31-1))}
	for _, vm := range orphans[:min(len(orphans), maxOrphansNamed)] {
		report.VMs = append(report.VMs, banlieuev1.OrphanedVM{ProviderID: vm.ProviderID, Name: vm.Name, Machine: orphanMachine(vm)})
	}
	return report
}
