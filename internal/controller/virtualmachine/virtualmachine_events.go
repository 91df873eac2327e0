package virtualmachine

import (
	"fmt"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
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
	infrav1.MachineReleasingReason:                 true,
	infrav1.MachineAdoptingReason:                  true,
	banlieuev1.VirtualMachineMachineNotFoundReason: true,
	banlieuev1.VirtualMachineMachineNotReadyReason: true,
}

// inProgress reports whether a machine whose Ready condition has status and reason is
// not Ready because a step is under way.
func inProgress(status metav1.ConditionStatus, reason string) bool {
	return status != metav1.ConditionTrue && progressingReasons[reason]
}

// maxNoteBytes is the longest Event note the API server accepts (events.k8s.io/v1 note,
// validated in bytes); it refuses the whole Event over it.
const maxNoteBytes = 1024

// eventNote formats an Event's note, redacts it (its parts are already sanitized where
// they quote a Provider; this is the last net) and cuts it to maxNoteBytes.
func eventNote(format string, args ...any) string {
	return truncate(redact.Text(fmt.Sprintf(format, args...)), maxNoteBytes)
}

// ellipsis ends a text that truncate cut.
const ellipsis = "…"

// truncate returns s cut to at most limit bytes, on a rune boundary and ending with an
// ellipsis when it was cut, so that a long message still reaches the API server.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// lifecycleEvent is an Event for one lifecycle step.
type lifecycleEvent struct {
	eventType, reason, action, note string
}

// lifecycleEvents returns an Event for each lifecycle step between the VM's status as
// stored before this reconcile and the status it is about to write. They are recorded
// once that write succeeded, so a step is reported once and an unchanged state never.
//
// A machine's progress is not a step of its own: a move from one step under way to
// another (MachineNotReady, Cloning, Updating) is not reported, and a machine that turns
// Ready in the write that makes the VM Running or Stopped is reported by that phase's
// Event alone.
func lifecycleEvents(before, after *banlieuev1.VirtualMachine) []lifecycleEvent {
	var out []lifecycleEvent
	phase := phaseEvent(before, after)
	if b, a := meta.FindStatusCondition(before.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition),
		meta.FindStatusCondition(after.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition); a != nil &&
		(b == nil || b.Status != a.Status || b.Reason != a.Reason) {
		e := infrastructureEvent(after, a)
		switch {
		case a.Status == metav1.ConditionTrue && phase != nil:
			phase.note += "; " + e.note
		case inProgress(a.Status, a.Reason) && (b == nil || inProgress(b.Status, b.Reason)):
			// Still under way, or just begun: the VM's phase (Provisioning) says so.
		default:
			out = append(out, e)
		}
	}
	if b, a := meta.FindStatusCondition(before.Status.Conditions, banlieuev1.VirtualMachinePlacementValidCondition),
		meta.FindStatusCondition(after.Status.Conditions, banlieuev1.VirtualMachinePlacementValidCondition); a != nil &&
		a.Reason == banlieuev1.VirtualMachineMigratingReason && (b == nil || b.Reason != a.Reason) {
		out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineMigratingReason, "Migrate",
			fmt.Sprintf("Moving the VM off Provider %s: %s", locationOf(after).ProviderKey(), a.Message)})
	}
	if phase != nil {
		out = append(out, *phase)
	}
	if id := after.Spec.AdoptProviderID; id != "" && before.Status.ProviderID == "" && after.Status.ProviderID != "" {
		out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineAdoptedReason, "Adopt",
			"Took over backend VM " + id + " on Provider " + locationOf(after).ProviderKey() + " as it was: no clone, no restart"})
	}
	if restarted(before, after) {
		out = append(out, lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineRestartedReason, "Restart",
			"The VM was power-cycled on Provider " + locationOf(after).ProviderKey() + " as spec.restartRequestedAt " +
				after.Status.Restart.RequestedAt.UTC().Format(time.RFC3339) + " asked"})
	}
	return out
}

// restarted reports whether after is the status that first records a restart as done
// (status.restart.result Restarted for a request before did not record so).
func restarted(before, after *banlieuev1.VirtualMachine) bool {
	a, b := after.Status.Restart, before.Status.Restart
	if a.RequestedAt == nil || a.Result != banlieuev1.RestartResultRestarted {
		return false
	}
	return b.Result != banlieuev1.RestartResultRestarted || !b.RequestedAt.Equal(a.RequestedAt)
}

// phaseEvent reports the VM entering phase Running or Stopped; nil for any other change.
func phaseEvent(before, after *banlieuev1.VirtualMachine) *lifecycleEvent {
	if before.Status.Phase == after.Status.Phase {
		return nil
	}
	switch after.Status.Phase {
	case banlieuev1.PhaseRunning:
		return &lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineRunningReason, "Run",
			"The VM is running on Provider " + locationOf(after).ProviderKey()}
	case banlieuev1.PhaseStopped:
		return &lifecycleEvent{corev1.EventTypeNormal, banlieuev1.VirtualMachineStoppedReason, "Stop",
			"The VM is powered off on Provider " + locationOf(after).ProviderKey()}
	}
	return nil
}

// infrastructureEvent reports the infrastructure machine's new Ready state c.
func infrastructureEvent(vm *banlieuev1.VirtualMachine, c *metav1.Condition) lifecycleEvent {
	ref := vm.Status.InfrastructureRef
	what := "The infrastructure machine"
	if ref.IsDefined() {
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
