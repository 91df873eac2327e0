package virtualmachine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// EventPolicy says which of core's Events are recorded on VirtualMachines. Each Event
// is one write to the API server: a fleet that does not read them may turn them down.
type EventPolicy string

// The event policies.
const (
	// EventsAll records every lifecycle step: the placement (Scheduled), the
	// machine's creation and deletion, and the machine's moves between Ready and a
	// step under way, besides what EventsTransitions records. The zero EventPolicy.
	EventsAll EventPolicy = "all"
	// EventsTransitions records the VM's phase changes (Running, Stopped, a failure),
	// every Warning, and what was done to a running VM (a resize, a migration, a
	// restart, a release): one Event from creation to Running.
	EventsTransitions EventPolicy = "transitions"
	// EventsNone records no Event; the VM's conditions and phase still say everything.
	EventsNone EventPolicy = "none"
)

// stepReasons are the Normal Events of lifecycle steps, which only EventsAll records.
var stepReasons = map[string]bool{
	banlieuev1.VirtualMachineScheduledReason:                 true,
	banlieuev1.VirtualMachineMachineCreatedReason:            true,
	banlieuev1.VirtualMachineMachineDeletingReason:           true,
	banlieuev1.VirtualMachineMachineDeletedReason:            true,
	banlieuev1.VirtualMachineInfrastructureReadyReason:       true,
	banlieuev1.VirtualMachineInfrastructureProgressingReason: true,
}

// ParseEventPolicy reads an EventPolicy as the --events flag gives it.
func ParseEventPolicy(s string) (EventPolicy, error) {
	switch p := EventPolicy(s); p {
	case EventsAll, EventsTransitions, EventsNone:
		return p, nil
	}
	return "", fmt.Errorf("%q is not an event policy: all, transitions or none", s)
}

// records reports whether the policy records an Event of eventType and reason.
func (p EventPolicy) records(eventType, reason string) bool {
	switch p {
	case EventsNone:
		return false
	case EventsTransitions:
		return eventType == corev1.EventTypeWarning || !stepReasons[reason]
	}
	return true
}
