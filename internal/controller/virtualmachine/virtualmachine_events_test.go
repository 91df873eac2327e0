package virtualmachine

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestLifecycleEventsReportOneEventPerStepAUserCaresAbout(t *testing.T) {
	// vm is a VM placed on Provider ns/p1 in phase, whose machine web-1 reports infra
	// ("status/reason/message", "" for no InfrastructureReady condition yet).
	vm := func(phase banlieuev1.Phase, infra string, mods ...func(*banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
		v := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Generation: 1}}
		v.Status.Phase = phase
		v.Status.Scheduled = banlieuev1.ScheduledPlacement{ProviderNamespace: "ns", ProviderName: "p1"}
		v.Status.InfrastructureRef = banlieuev1.ContractVersionedObjectReference{APIGroup: "infrastructure.banlieue.io", Kind: "VSphereMachine", Name: "web-1"}
		if infra != "" {
			p := strings.SplitN(infra, "/", 3)
			v.Status.Conditions = append(v.Status.Conditions, metav1.Condition{Type: banlieuev1.VirtualMachineInfrastructureReadyCondition,
				Status: metav1.ConditionStatus(p[0]), Reason: p[1], Message: p[2]})
		}
		for _, m := range mods {
			m(v)
		}
		return v
	}
	unplaced := func(v *banlieuev1.VirtualMachine) {
		v.Status.Scheduled, v.Status.InfrastructureRef = banlieuev1.ScheduledPlacement{}, banlieuev1.ContractVersionedObjectReference{}
	}
	migrating := func(v *banlieuev1.VirtualMachine) {
		v.Status.Conditions = append(v.Status.Conditions, metav1.Condition{Type: banlieuev1.VirtualMachinePlacementValidCondition,
			Status: metav1.ConditionFalse, Reason: banlieuev1.VirtualMachineMigratingReason, Message: "Provider ns/p1 is being deleted"})
	}
	const (
		provisioning = banlieuev1.PhaseProvisioning
		running      = banlieuev1.PhaseRunning
		stopped      = banlieuev1.PhaseStopped
		notReady     = "False/MachineNotReady/waiting for VSphereMachine web-1 to be Ready"
		cloning      = "False/Cloning/clone in progress"
		updating     = "False/Updating/update in progress"
		ready        = "True/Provisioned/"
		taskFailed   = "False/TaskFailed/disk full"
	)
	normal := func(reason, note string) lifecycleEvent {
		action := map[string]string{
			banlieuev1.VirtualMachineRunningReason:                   "Run",
			banlieuev1.VirtualMachineStoppedReason:                   "Stop",
			banlieuev1.VirtualMachineMigratingReason:                 "Migrate",
			banlieuev1.VirtualMachineInfrastructureReadyReason:       "Provision",
			banlieuev1.VirtualMachineInfrastructureProgressingReason: "Provision",
		}[reason]
		return lifecycleEvent{corev1.EventTypeNormal, reason, action, note}
	}
	for _, tc := range []struct {
		name          string
		before, after *banlieuev1.VirtualMachine
		want          []lifecycleEvent
	}{
		// The happy path: Scheduled is recorded with the machine's creation, outside
		// lifecycleEvents; then Running, and nothing in between.
		{"placed, the machine not Ready yet", vm(banlieuev1.PhaseScheduling, "", unplaced), vm(provisioning, notReady), nil},
		{"the machine starts a step", vm(provisioning, notReady), vm(provisioning, cloning), nil},
		{"the machine moves to the next step", vm(provisioning, cloning), vm(provisioning, updating), nil},
		{"the step's message changes", vm(provisioning, cloning), vm(provisioning, "False/Cloning/clone 40% done"), nil},
		{"the machine is found missing while provisioning", vm(provisioning, cloning), vm(provisioning, "False/MachineNotFound/VSphereMachine web-1 does not exist yet"), nil},
		{"Ready and running in one write: the phase's Event carries the machine's reason",
			vm(provisioning, notReady), vm(running, ready),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineRunningReason, "The VM is running on Provider ns/p1; VSphereMachine web-1 is Ready: Provisioned")}},
		{"Ready and stopped in one write, with the machine's message",
			vm(provisioning, cloning), vm(stopped, "True/Provisioned/guest has no address"),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineStoppedReason, "The VM is powered off on Provider ns/p1; VSphereMachine web-1 is Ready: Provisioned (guest has no address)")}},

		// Failures and recovery.
		{"a step fails", vm(provisioning, cloning), vm(provisioning, taskFailed),
			[]lifecycleEvent{{corev1.EventTypeWarning, banlieuev1.VirtualMachineInfrastructureFailedReason, "Provision", "VSphereMachine web-1 is not Ready: TaskFailed (disk full)"}}},
		{"the machine's first report is a failure", vm(banlieuev1.PhaseScheduling, "", unplaced), vm(provisioning, "False/TemplateNotFound/no template"),
			[]lifecycleEvent{{corev1.EventTypeWarning, banlieuev1.VirtualMachineInfrastructureFailedReason, "Provision", "VSphereMachine web-1 is not Ready: TemplateNotFound (no template)"}}},
		{"a failure gives way to a step under way", vm(provisioning, taskFailed), vm(provisioning, cloning),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineInfrastructureProgressingReason, "VSphereMachine web-1 is not Ready: Cloning (clone in progress)")}},
		{"a Ready machine starts a step", vm(running, ready), vm(provisioning, updating),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineInfrastructureProgressingReason, "VSphereMachine web-1 is not Ready: Updating (update in progress)")}},
		{"Ready again after a failure, running again", vm(provisioning, taskFailed), vm(running, ready),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineRunningReason, "The VM is running on Provider ns/p1; VSphereMachine web-1 is Ready: Provisioned")}},
		{"Ready again without a phase change", vm(banlieuev1.PhaseMigrating, taskFailed, migrating), vm(banlieuev1.PhaseMigrating, ready, migrating),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineInfrastructureReadyReason, "VSphereMachine web-1 is Ready: Provisioned")}},
		{"Ready with another reason", vm(running, ready), vm(running, "True/Adopted/"),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineInfrastructureReadyReason, "VSphereMachine web-1 is Ready: Adopted")}},

		// Phases and migration.
		{"powered on again: the phase alone", vm(stopped, ready), vm(running, ready),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineRunningReason, "The VM is running on Provider ns/p1")}},
		{"powered off", vm(running, ready), vm(stopped, ready),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineStoppedReason, "The VM is powered off on Provider ns/p1")}},
		{"a migration starts", vm(running, ready), vm(banlieuev1.PhaseMigrating, ready, migrating),
			[]lifecycleEvent{normal(banlieuev1.VirtualMachineMigratingReason, "Moving the VM off Provider ns/p1: Provider ns/p1 is being deleted")}},
		{"nothing changed", vm(running, ready), vm(running, ready), nil},
		{"only Ready's message changed", vm(running, ready), vm(running, "True/Provisioned/guest has no address"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(lifecycleEvents(tc.before, tc.after)).To(Equal(tc.want))
		})
	}
}

func TestTheVMKeepsItsInfrastructureReasonWhileTheMachineMovesBetweenSteps(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string) *metav1.Condition {
		return &metav1.Condition{Type: banlieuev1.ReadyCondition, Status: status, Reason: reason}
	}
	f, tr := metav1.ConditionFalse, metav1.ConditionTrue
	for _, tc := range []struct {
		name        string
		vm, ready   *metav1.Condition
		keepsItsOwn bool
	}{
		{"MachineNotReady, the machine Cloning", cond(f, "MachineNotReady"), cond(f, "Cloning"), true},
		{"MachineNotReady, the machine without a Ready condition", cond(f, "MachineNotReady"), nil, true},
		{"Cloning, the machine Updating", cond(f, "Cloning"), cond(f, "Updating"), true},
		{"MachineNotFound, the machine found Cloning", cond(f, "MachineNotFound"), cond(f, "Cloning"), false},
		{"MachineNotReady, the machine Ready", cond(f, "MachineNotReady"), cond(tr, "Provisioned"), false},
		{"MachineNotReady, the machine failed", cond(f, "MachineNotReady"), cond(f, "TaskFailed"), false},
		{"a failure, the machine Cloning", cond(f, "TaskFailed"), cond(f, "Cloning"), false},
		{"Ready, the machine Updating", cond(tr, "Provisioned"), cond(f, "Updating"), false},
		{"no condition yet", nil, cond(f, "Cloning"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepsProgress(tc.vm, tc.ready); got != tc.keepsItsOwn {
				t.Errorf("keepsProgress = %t, want %t", got, tc.keepsItsOwn)
			}
		})
	}
}
