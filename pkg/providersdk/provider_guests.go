package providersdk

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
)

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
	if err != nil || !waitsForAddress(status) {
		return ""
	}
	return id
}

// waitsForAddress reports whether a machine's status says Ready and powered on, without
// an address.
func waitsForAddress(status infrav1.MachineStatus) bool {
	return len(status.Addresses) == 0 && status.PowerState == banlieuev1.PowerStatePoweredOn &&
		meta.IsStatusConditionTrue(status.Conditions, banlieuev1.ReadyCondition)
}
