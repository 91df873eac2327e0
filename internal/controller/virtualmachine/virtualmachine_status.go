package virtualmachine

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// maxConditionMessageBytes is the longest condition message the API server accepts
// (metav1.Condition's maxLength); a longer one would fail the whole status write.
const maxConditionMessageBytes = 32768

// setCondition sets a condition on the VM; its lastTransitionTime changes only when its
// status does, and an empty reason falls back to the condition's state. A message is
// cut to what the API server accepts.
func setCondition(vm *banlieuev1.VirtualMachine, conditionType string, ok bool, reason, message string) {
	message = truncate(message, maxConditionMessageBytes)
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	if reason == "" {
		reason = string(status)
	}
	meta.SetStatusCondition(&vm.Status.Conditions, metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message, ObservedGeneration: vm.Generation,
	})
}

// summarize derives the VM's phase and its Scheduled and Ready conditions from the rest
// of its status. It is pure, so every reconcile path ends with the same summary.
func summarize(s *scope) {
	vm := s.vm
	if sc := vm.Status.Scheduled; sc.IsDefined() {
		msg := fmt.Sprintf("placed on Provider %s/%s, failure domain %q", sc.ProviderNamespace, sc.ProviderName, sc.FailureDomain)
		if vm.Spec.AdoptProviderID != "" {
			// An adopted VM is where it was: no failure domain was chosen for it.
			msg = fmt.Sprintf("placed on Provider %s/%s, which owns the adopted VM %s", sc.ProviderNamespace, sc.ProviderName, vm.Spec.AdoptProviderID)
		}
		setCondition(vm, banlieuev1.VirtualMachineScheduledCondition, true, banlieuev1.VirtualMachineScheduledReason, msg)
	}
	infraReady := meta.IsStatusConditionTrue(vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition)
	powerMatches := vm.Status.ObservedPowerState == vm.Spec.DesiredPowerState

	setPaused(s)
	switch {
	case !vm.DeletionTimestamp.IsZero():
		vm.Status.Phase = banlieuev1.PhaseDeleting
		return // reconcileDelete owns Ready while deleting.
	case s.paused:
		// Left alone: the phase stays what it was, and Ready says what it said; a VM
		// paused from its creation on waits, unplaced.
		if vm.Status.Phase == "" {
			vm.Status.Phase = banlieuev1.PhasePending
			setCondition(vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachinePausedReason, "the VM is paused and not placed yet")
		}
		return
	case s.migrating:
		vm.Status.Phase = banlieuev1.PhaseMigrating
	case !vm.Status.Scheduled.IsDefined() && s.missingRef != nil:
		vm.Status.Phase = banlieuev1.PhasePending
	case !vm.Status.Scheduled.IsDefined():
		vm.Status.Phase = banlieuev1.PhaseScheduling
	case s.machineFailed:
		vm.Status.Phase = banlieuev1.PhaseFailed
	case !infraReady:
		vm.Status.Phase = banlieuev1.PhaseProvisioning
	case vm.Status.ObservedPowerState == banlieuev1.PowerStatePoweredOn:
		vm.Status.Phase = banlieuev1.PhaseRunning
	default:
		vm.Status.Phase = banlieuev1.PhaseStopped
	}

	switch c := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachineScheduledCondition); {
	case c == nil:
		setCondition(vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachineNoCandidateReason, "waiting to be scheduled")
	case c.Status != metav1.ConditionTrue:
		setCondition(vm, banlieuev1.ReadyCondition, false, c.Reason, c.Message)
	case s.missingRef != nil:
		setCondition(vm, banlieuev1.ReadyCondition, false, s.missingRef.Reason, s.missingRef.Message)
	case s.migrating:
		c := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachinePlacementValidCondition)
		setCondition(vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachineMigratingReason, c.Message)
	case !infraReady:
		c := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition)
		if c == nil {
			setCondition(vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachineMachineNotFoundReason, "the infrastructure machine does not exist yet")
		} else {
			setCondition(vm, banlieuev1.ReadyCondition, false, c.Reason, c.Message)
		}
	case !powerMatches:
		setCondition(vm, banlieuev1.ReadyCondition, false, banlieuev1.VirtualMachinePowerStateMismatchReason,
			fmt.Sprintf("the VM is %s, waiting for %s", powerOrUnknown(vm.Status.ObservedPowerState), vm.Spec.DesiredPowerState))
	default:
		setCondition(vm, banlieuev1.ReadyCondition, true, banlieuev1.VirtualMachineRunningReason, "")
	}
}

// setPaused sets the VM's Paused condition: True while its spec.paused is, or while its
// machine reports itself paused (its Provider is paused), False otherwise.
func setPaused(s *scope) {
	switch {
	case s.paused:
		setCondition(s.vm, banlieuev1.VirtualMachinePausedCondition, true, banlieuev1.VirtualMachinePausedReason,
			"spec.paused is true: the VM and its infrastructure machine are left alone")
	case s.machinePaused != nil:
		setCondition(s.vm, banlieuev1.VirtualMachinePausedCondition, true, banlieuev1.VirtualMachinePausedReason,
			"the infrastructure machine is paused: "+s.machinePaused.Message)
	default:
		setCondition(s.vm, banlieuev1.VirtualMachinePausedCondition, false, banlieuev1.VirtualMachineNotPausedReason, "")
	}
}

func powerOrUnknown(p banlieuev1.PowerState) string {
	if p == "" {
		return "in an unknown power state"
	}
	return string(p)
}
