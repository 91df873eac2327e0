package providersdk

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
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
	orphans, err := r.orphansOf(ctx, marked)
	if err != nil {
		return next, err
	}
	r.scanned(p.UID, now)
	status.Orphans = orphanReport(orphans)
	return next, nil
}

// orphansOf returns the VMs of marked whose machine UID no machine of the kind has in
// any namespace (read from the cache), each confirmed by a live GET of the machine its
// mark names, when it names one.
func (r *ProviderReconciler) orphansOf(ctx context.Context, marked []MarkedVM) ([]MarkedVM, error) {
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
		if vm.MachineUID == "" || known[vm.MachineUID] {
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
		machine := string(vm.MachineUID)
		if vm.Machine.Name != "" {
			machine = vm.Machine.Namespace + "/" + vm.Machine.Name + "/" + machine
		}
		report.VMs = append(report.VMs, banlieuev1.OrphanedVM{ProviderID: vm.ProviderID, Name: vm.Name, Machine: machine})
	}
	return report
}
