package virtualmachine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// gathered reads the metric name with exactly labels from controller-runtime's
// registry, as the metrics endpoint serves it: a gauge's value, or a histogram's
// sample count and sum; a counter's value. A series that does not exist reads as zero.
func gathered(g Gomega, name string, labels map[string]string) (value float64, count uint64) {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			if !labelsAre(m.GetLabel(), labels) {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				return h.GetSampleSum(), h.GetSampleCount()
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), 0
			}
			return m.GetGauge().GetValue(), 0
		}
	}
	return 0, 0
}

func labelsAre(pairs []*dto.LabelPair, want map[string]string) bool {
	if len(pairs) != len(want) {
		return false
	}
	for _, p := range pairs {
		if v, ok := want[p.GetName()]; !ok || v != p.GetValue() {
			return false
		}
	}
	return true
}

// vmsIn reads banlieue_virtualmachines for phase and provider.
func vmsIn(g Gomega, phase banlieuev1.Phase, provider string) float64 {
	v, _ := gathered(g, "banlieue_virtualmachines", map[string]string{"phase": string(phase), "provider": provider})
	return v
}

// events returns the Events recorded on the VM name, by reason.
func (f *fixture) events(g Gomega, name string) map[string]eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(f.ctx, list, client.InNamespace(f.ns))).To(Succeed())
	out := map[string]eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "VirtualMachine" && e.Regarding.Name == name {
			out[e.Reason] = e
		}
	}
	return out
}

// expectEvent waits for an Event of reason and type on the VM name, recorded once.
func (f *fixture) expectEvent(name, reason, eventType, noteContains string) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		e, ok := f.events(g, name)[reason]
		g.Expect(ok).To(BeTrue(), "no %s Event on %s", reason, name)
		g.Expect(e.Type).To(Equal(eventType))
		g.Expect(e.Note).To(ContainSubstring(noteContains))
		g.Expect(e.Series).To(BeNil(), "the %s Event was recorded more than once", reason)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

func TestLifecycleStepsAreEventsAndMetrics(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	p := f.provider("p1", nil, func(p *banlieuev1.Provider) {
		p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"}
	})
	on := f.ns + "/p1"
	sumBefore, readyBefore := gathered(f.g, "banlieue_virtualmachine_ready_seconds", nil)
	vm := f.vm("v", class, image)

	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseProvisioning))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Reason).To(Equal(banlieuev1.VirtualMachineMachineNotReadyReason))
		g.Expect(vmsIn(g, banlieuev1.PhaseProvisioning, on)).To(Equal(1.0))
	})
	// Placed and its machine created: one Event.
	f.expectEvent("v", banlieuev1.VirtualMachineScheduledReason, corev1.EventTypeNormal, "Placed on Provider "+on+", failure domain \"\"; created TestMachine v")
	f.g.Eventually(func(g Gomega) {
		g.Expect(f.machine("v").Status.Conditions).To(ContainElement(HaveField("Reason", "Cloning")))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	// The machine's progress is no step of its own.
	f.g.Consistently(func(g Gomega) {
		g.Expect(f.events(g, "v")).To(HaveLen(1), "Events other than Scheduled while the machine clones")
	}, 500*time.Millisecond).Should(Succeed())

	f.update(p, func() { p.Spec.Parameters = nil })
	m := f.machine("v")
	f.update(m, func() { m.Labels = map[string]string{"poke": "1"} }) // the test provider does not watch Providers
	running := f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vmsIn(g, banlieuev1.PhaseRunning, on)).To(Equal(1.0))
		g.Expect(vmsIn(g, banlieuev1.PhaseProvisioning, on)).To(BeZero())
	})
	// The machine turned Ready in the write that made the VM Running: the phase's Event
	// says both.
	f.expectEvent("v", banlieuev1.VirtualMachineRunningReason, corev1.EventTypeNormal, "The VM is running on Provider "+on+"; TestMachine v is Ready: Provisioned")
	f.g.Consistently(func(g Gomega) {
		g.Expect(f.events(g, "v")).To(HaveLen(2), "Events other than Scheduled and Running from creation to Ready")
	}, 500*time.Millisecond).Should(Succeed())

	// The time to Ready was observed; other tests' VMs may have turned Ready meanwhile,
	// but none is older than this test's, so the mean is bounded by this VM's age.
	sum, count := gathered(f.g, "banlieue_virtualmachine_ready_seconds", nil)
	f.g.Expect(count).To(BeNumerically(">", readyBefore))
	readyAt := condition(running, banlieuev1.ReadyCondition).LastTransitionTime.Time
	age := readyAt.Sub(running.CreationTimestamp.Time).Seconds()
	f.g.Expect(sum-sumBefore).To(BeNumerically(">=", age-1), "the VM's own time to Ready was observed")
	f.g.Expect((sum - sumBefore) / float64(count-readyBefore)).To(BeNumerically("<=", time.Since(running.CreationTimestamp.Time).Seconds()+1))

	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseStopped))
		g.Expect(vmsIn(g, banlieuev1.PhaseStopped, on)).To(Equal(1.0))
		g.Expect(vmsIn(g, banlieuev1.PhaseRunning, on)).To(BeZero())
	})
	f.expectEvent("v", banlieuev1.VirtualMachineStoppedReason, corev1.EventTypeNormal, "powered off on Provider "+on)

	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, clientKey(vm), &banlieuev1.VirtualMachine{})).NotTo(Succeed())
		for _, phase := range []banlieuev1.Phase{banlieuev1.PhaseStopped, banlieuev1.PhaseDeleting} {
			g.Expect(vmsIn(g, phase, on)).To(BeZero(), "a deleted VM still counts as %s", phase)
		}
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	f.expectEvent("v", banlieuev1.VirtualMachineMachineDeletingReason, corev1.EventTypeNormal, "Deleting TestMachine v")
	f.expectEvent("v", banlieuev1.VirtualMachineMachineDeletedReason, corev1.EventTypeNormal, "TestMachine v is gone")
}

func TestMigrationStartAndCompletionAreEvents(t *testing.T) {
	f, vm := onOldOfTwoProviders(t, banlieuev1.MigrationPolicyAutomatic)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vmsIn(g, banlieuev1.PhaseRunning, f.ns+"/old")).To(Equal(1.0))
	})
	m := f.machine("v")
	f.update(m, func() { m.Annotations = map[string]string{testv1.HoldDeletionAnnotation: ""} })
	moveToNew(f, vm)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseMigrating))
		g.Expect(vmsIn(g, banlieuev1.PhaseMigrating, f.ns+"/old")).To(Equal(1.0))
		g.Expect(vmsIn(g, banlieuev1.PhaseRunning, f.ns+"/old")).To(BeZero())
	})
	// The start is reported once, however often the held deletion wakes the VM.
	f.expectEvent("v", banlieuev1.VirtualMachineMigratingReason, corev1.EventTypeNormal, "Moving the VM off Provider "+f.ns+"/old")
	f.g.Consistently(func(g Gomega) {
		g.Expect(f.events(g, "v")).NotTo(HaveKey(banlieuev1.VirtualMachineMigratedReason))
	}, time.Second).Should(Succeed())

	f.update(m, func() { delete(m.Annotations, testv1.HoldDeletionAnnotation) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vm.Status.Scheduled.ProviderName).To(Equal("new"))
		g.Expect(vmsIn(g, banlieuev1.PhaseRunning, f.ns+"/new")).To(Equal(1.0))
		g.Expect(vmsIn(g, banlieuev1.PhaseMigrating, f.ns+"/old")).To(BeZero())
	})
	f.expectEvent("v", banlieuev1.VirtualMachineMigratedReason, corev1.EventTypeNormal, "Old machine on Provider "+f.ns+"/old is gone; moved to Provider "+f.ns+"/new")
}

func TestAFailedMachineIsAWarning(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	p := f.provider("p1", nil)
	f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) { vm.Spec.MigrationPolicy = banlieuev1.MigrationPolicyNever })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	// With its Provider gone the machine reports ProviderNotFound; the VM stays put.
	f.g.Expect(k8s.Delete(f.ctx, p)).To(Succeed())
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition).Reason).To(Equal("ProviderNotFound"))
		g.Expect(vmsIn(g, banlieuev1.PhaseProvisioning, f.ns+"/p1")).To(Equal(1.0))
	})
	f.expectEvent("v", banlieuev1.VirtualMachineInfrastructureFailedReason, corev1.EventTypeWarning, "TestMachine v is not Ready: ProviderNotFound")

	// Back with its Provider, the machine leaves the failure for a step under way: that
	// is reported, as the VM would otherwise still show the failure's Warning last.
	f.provider("p1", nil, func(p *banlieuev1.Provider) {
		p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"}
	})
	m := f.machine("v")
	f.update(m, func() { m.Labels = map[string]string{"poke": "1"} }) // the test provider does not watch Providers
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition).Reason).To(Equal("Cloning"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseProvisioning))
	})
	f.expectEvent("v", banlieuev1.VirtualMachineInfrastructureProgressingReason, corev1.EventTypeNormal, "TestMachine v is not Ready: Cloning (clone in progress)")
}

func TestTimeToReadyIsObservedOncePerVMForATransitionThisProcessWrote(t *testing.T) {
	g := NewWithT(t)
	vm := func(uid types.UID, ready metav1.ConditionStatus) *banlieuev1.VirtualMachine {
		v := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: "unit", Name: string(uid), CreationTimestamp: metav1.Now()}}
		if ready != "" {
			v.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: ready, LastTransitionTime: metav1.Now()}}
		}
		return v
	}
	m := &vmMetrics{}
	for _, uid := range []types.UID{"a", "b", "c"} {
		m.record(vm(uid, ""))
	}
	g.Expect(m.observeReady(vm("a", metav1.ConditionFalse), vm("a", metav1.ConditionTrue))).To(BeTrue(), "first Ready=True")
	g.Expect(m.observeReady(vm("a", metav1.ConditionFalse), vm("a", metav1.ConditionTrue))).To(BeFalse(), "Ready=True again, same VM")
	g.Expect(m.observeReady(vm("b", metav1.ConditionTrue), vm("b", metav1.ConditionTrue))).To(BeFalse(), "Ready already when this process found it")
	g.Expect(m.observeReady(vm("c", ""), vm("c", metav1.ConditionFalse))).To(BeFalse(), "not Ready")
	g.Expect(m.observeReady(vm("c", ""), vm("c", metav1.ConditionTrue))).To(BeTrue(), "first Ready=True without an earlier condition")
	m.forget("a")
	g.Expect(m.observeReady(vm("a", metav1.ConditionFalse), vm("a", metav1.ConditionTrue))).To(BeFalse(), "released VM")
}

func TestTheVMGaugeMovesAVMBetweenSeries(t *testing.T) {
	g := NewWithT(t)
	const provider = "unit/gauge"
	vm := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{UID: "gauge-1", Namespace: "unit", Name: "v"}}
	m := &vmMetrics{}

	vm.Status.Scheduled = banlieuev1.ScheduledPlacement{ProviderNamespace: "unit", ProviderName: "gauge"}
	m.record(vm) // no phase yet (paused since its creation): not counted
	g.Expect(vmsIn(g, "", provider)).To(BeZero())
	vm.Status.Phase = banlieuev1.PhaseProvisioning
	m.record(vm)
	g.Expect(vmsIn(g, banlieuev1.PhaseProvisioning, provider)).To(Equal(1.0))

	vm.Status.Phase = banlieuev1.PhaseRunning
	m.record(vm)
	m.record(vm) // an unchanged VM counts once
	g.Expect(vmsIn(g, banlieuev1.PhaseRunning, provider)).To(Equal(1.0))
	g.Expect(vmsIn(g, banlieuev1.PhaseProvisioning, provider)).To(BeZero())

	m.forgetName(types.NamespacedName{Namespace: "unit", Name: "v"})
	g.Expect(vmsIn(g, banlieuev1.PhaseRunning, provider)).To(BeZero())
	m.forget("gauge-1") // already gone: nothing to undo
	g.Expect(vmsIn(g, banlieuev1.PhaseRunning, provider)).To(BeZero())
}

func TestARestartRequestReachesTheMachineAndIsReportedOnce(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	on := f.ns + "/p1"
	vm := f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	restartsBefore, _ := gathered(f.g, "banlieue_virtualmachine_restarts_total", map[string]string{"provider": on})

	at := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	f.update(vm, func() { vm.Spec.RestartRequestedAt = &at })
	f.g.Eventually(func(g Gomega) {
		g.Expect(f.machine("v").Spec.RestartRequestedAt).To(HaveField("Time", BeTemporally("==", at.Time)))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	done := f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted))
		g.Expect(vm.Status.Restart.RequestedAt.Time).To(BeTemporally("==", at.Time))
		g.Expect(vm.Status.Restart.CompletedAt).NotTo(BeNil())
	})
	f.g.Expect(done.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	f.expectEvent("v", banlieuev1.VirtualMachineRestartedReason, corev1.EventTypeNormal, "The VM was power-cycled on Provider "+on)
	f.g.Consistently(func(g Gomega) {
		e := f.events(g, "v")[banlieuev1.VirtualMachineRestartedReason]
		g.Expect(e.Series).To(BeNil(), "the Restarted Event was recorded more than once")
		restarts, _ := gathered(g, "banlieue_virtualmachine_restarts_total", map[string]string{"provider": on})
		g.Expect(restarts - restartsBefore).To(Equal(1.0))
	}, time.Second, 100*time.Millisecond).Should(Succeed())
}
