package virtualmachine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// progressingReasons are the infrastructure machine's Ready reasons that say a step is
// under way rather than that something failed; every other reason of a machine that
// is not Ready is a Warning, including the custom reasons of a driver's PermanentError.
var progressingReasons = map[string]bool{
	infrav1.MachineTaskInFlightReason:              true,
	infrav1.MachineCreatingReason:                  true,
	infrav1.MachineCloningReason:                   true,
	infrav1.MachineUpdatingReason:                  true,
	infrav1.MachineDeletingReason:                  true,
	banlieuev1.VirtualMachineMachineNotFoundReason: true,
	banlieuev1.VirtualMachineMachineNotReadyReason: true,
}

// lifecycleEvent is an Event for one lifecycle step.
type lifecycleEvent struct {
	eventType, reason, action, note string
}

// lifecycleEvents returns an Event for each lifecycle step between the VM's status as
// stored before this reconcile and the status it is about to write. They are recorded
// once that write succeeded, so a step is reported once and an unchanged state never.
func lifecycleEvents(before, after *banlieuev1.VirtualMachine) []lifecycleEvent {
	var out []lifecycleEvent
	if b, a := meta.FindStatusCondition(before.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition),
		meta.FindStatusCondition(after.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition); a != nil &&
		(b == nil || b.Status != a.Status || b.Reason != a.Reason) &&
		// A machine that has just been created has reported nothing yet; MachineCreated
		// already says so.
		(b != nil || a.Reason != banlieuev1.VirtualMachineMachineNotReadyReason) {
		out = append(out, infrastructureEvent(after, a))
	}
	if b, a := meta.FindStatusCondition(before.Status.Conditions, banlieuev1.VirtualMachinePlacementValidCondition),
		meta.FindStatusCondition(after.Status.Conditions, banlieuev1.VirtualMachinePlacementValidCondition); a != nil &&
		a.Reason == banlieuev1.VirtualMachineMigratingReason && (b == nil || b.Reason != a.Reason) {
		out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineMigratingReason, "Migrate",
			fmt.Sprintf("Moving the VM off Provider %s: %s", locationOf(after).ProviderKey(), a.Message)})
	}
	if before.Status.Phase != after.Status.Phase {
		switch after.Status.Phase {
		case banlieuev1.PhaseRunning:
			out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineRunningReason, "Run",
				"The VM is running on Provider " + locationOf(after).ProviderKey()})
		case banlieuev1.PhaseStopped:
			out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineStoppedReason, "Stop",
				"The VM is powered off on Provider " + locationOf(after).ProviderKey()})
		}
	}
	return out
}

// infrastructureEvent reports the infrastructure machine's new Ready state c.
func infrastructureEvent(vm *banlieuev1.VirtualMachine, c *metav1.Condition) lifecycleEvent {
	ref := vm.Status.InfrastructureRef
	what := "The infrastructure machine"
	if ref != nil {
		what = ref.Kind + " " + ref.Name
	}
	e := lifecycleEvent{corev1.EventTypeWarning, banlieuev1.VirtualMachineInfrastructureFailedReason, "Provision",
		fmt.Sprintf("%s is not Ready: %s", what, c.Reason)}
	switch {
	case c.Status == metav1.ConditionTrue:
		e.eventType, e.reason = corev1.EventTypeNormal, banlieuev1.VirtualMachineInfrastructureReadyReason
		e.note = fmt.Sprintf("%s is Ready: %s", what, c.Reason)
	case progressingReasons[c.Reason]:
		e.eventType, e.reason = corev1.EventTypeNormal, banlieuev1.VirtualMachineInfrastructureProgressingReason
	}
	if c.Message != "" {
		e.note += " (" + c.Message + ")"
	}
	return e
}
