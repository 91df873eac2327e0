package virtualmachine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestEachEventPolicyRecordsWhatItSays(t *testing.T) {
	normal, warning := corev1.EventTypeNormal, corev1.EventTypeWarning
	for _, tt := range []struct {
		name       string
		eventType  string
		reason     string
		all, trans bool
	}{
		{"the placement is a step", normal, banlieuev1.VirtualMachineScheduledReason, true, false},
		{"the machine's creation is a step", normal, banlieuev1.VirtualMachineMachineCreatedReason, true, false},
		{"the machine's deletion is a step", normal, banlieuev1.VirtualMachineMachineDeletedReason, true, false},
		{"the machine's progress is a step", normal, banlieuev1.VirtualMachineInfrastructureProgressingReason, true, false},
		{"Running is a transition", normal, banlieuev1.VirtualMachineRunningReason, true, true},
		{"a restart is a transition", normal, banlieuev1.VirtualMachineRestartedReason, true, true},
		{"a release is a transition", normal, banlieuev1.VirtualMachineReleasedReason, true, true},
		{"a resize is a transition", normal, banlieuev1.VirtualMachineResizedReason, true, true},
		{"a Warning is always worth one", warning, banlieuev1.VirtualMachineNoCandidateReason, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for policy, want := range map[EventPolicy]bool{"": tt.all, EventsAll: tt.all, EventsTransitions: tt.trans, EventsNone: false} {
				if got := policy.records(tt.eventType, tt.reason); got != want {
					t.Errorf("policy %q records %s %s: %v, want %v", policy, tt.eventType, tt.reason, got, want)
				}
			}
		})
	}
}

func TestParseEventPolicyTakesTheThreeNamesOnly(t *testing.T) {
	for _, s := range []string{"all", "transitions", "none"} {
		if p, err := ParseEventPolicy(s); err != nil || string(p) != s {
			t.Errorf("ParseEventPolicy(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParseEventPolicy("some"); err == nil || err.Error() != `"some" is not an event policy: all, transitions or none` {
		t.Errorf("ParseEventPolicy(some) error %v", err)
	}
}
