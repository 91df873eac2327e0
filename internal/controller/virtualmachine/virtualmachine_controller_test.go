package virtualmachine

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

func TestMachineIsCreatedWithTheResolvedSpecAndStatusIsMirrored(t *testing.T) {
	f := newFixture(t)
	class := f.class("large", func(c *banlieuev1.VMClass) {
		c.Spec.Firmware = banlieuev1.FirmwareEFI
		c.Spec.Hardware.Disks = append(c.Spec.Hardware.Disks, banlieuev1.Disk{Name: "data", SizeGiB: 100, StorageClass: "fast", Provisioning: banlieuev1.DiskProvisioningThick})
	})
	image := f.image("ubuntu")
	f.provider("p1", []banlieuev1.FailureDomain{builder.FailureDomain("fd-a", "zone", "a")})
	f.create(builder.UserDataSecret(f.ns, "cloud-init", map[string][]byte{"user-data": []byte("#cloud-config\n")}))
	secretRef := banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}, Key: "user-data"}
	f.vm("web", class, image, func(vm *banlieuev1.VirtualMachine) { vm.Spec.UserData = secretRef })

	vm := f.eventuallyVM("web", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	m := f.machine("web")
	f.g.Expect(m).NotTo(BeNil())
	f.g.Expect(metav1.IsControlledBy(m, vm)).To(BeTrue(), "the VM controls its machine")
	f.g.Expect(m.Spec.MachineSpec).To(Equal(infrav1.MachineSpec{
		ProviderRef:   infrav1.ProviderRef{Namespace: f.ns, Name: "p1"},
		FailureDomain: "fd-a",
		Image:         infrav1.MachineImage{Name: image.Name, Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-tpl"},
		Hardware:      infrav1.MachineHardware{CPUs: 2, MemoryMiB: 4096, Firmware: banlieuev1.FirmwareEFI},
		Disks: []infrav1.MachineDisk{
			{Name: "root", SizeGiB: 20, Provisioning: banlieuev1.DiskProvisioningThin, StorageClass: "fast", Target: map[string]string{"datastore": "ds-p1"}},
			{Name: "data", SizeGiB: 100, Provisioning: banlieuev1.DiskProvisioningThick, StorageClass: "fast", Target: map[string]string{"datastore": "ds-p1"}},
		},
		Interfaces:     []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: map[string]string{"portgroup": "pg-p1"}}},
		PowerState:     banlieuev1.PowerStatePoweredOn,
		UserData:       &secretRef,
		ProviderID:     "test://" + string(m.UID),
		DeletionPolicy: banlieuev1.DeletionPolicyDelete,
	}))
	f.g.Expect(vm.Status.ProviderID).To(Equal("test://" + string(m.UID)))
	f.g.Expect(vm.Status.Addresses).To(Equal([]banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: "192.0.2.10"}}))
	f.g.Expect(vm.Status.InfrastructureRef).To(Equal(banlieuev1.ContractVersionedObjectReference{APIGroup: testv1.GroupVersion.Group, Kind: "TestMachine", Name: "web"}))
	f.g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn))
	f.g.Expect(*vm.Status.Initialization.Provisioned).To(BeTrue())
	f.g.Expect(vm.Status.ObservedGeneration).To(Equal(vm.Generation))

	// Each step the user cares about is an Event on the VM, and from creation to Ready
	// those are two: placed with its machine created, then running.
	reasons := func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(k8s.List(f.ctx, list, client.InNamespace(f.ns))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Name == "web" && e.Regarding.Kind == "VirtualMachine" {
				g.Expect(e.Series).To(BeNil(), "the %s Event was recorded more than once", e.Reason)
				out = append(out, e.Reason)
			}
		}
		return out
	}
	f.g.Eventually(reasons, 10*time.Second).Should(ConsistOf(banlieuev1.VirtualMachineScheduledReason, banlieuev1.VirtualMachineRunningReason))
	f.g.Consistently(reasons, 500*time.Millisecond).Should(ConsistOf(banlieuev1.VirtualMachineScheduledReason, banlieuev1.VirtualMachineRunningReason))
	f.expectEvent("web", banlieuev1.VirtualMachineScheduledReason, corev1.EventTypeNormal,
		fmt.Sprintf("Placed on Provider %s/p1, failure domain \"fd-a\"; created TestMachine web", f.ns))
	f.expectEvent("web", banlieuev1.VirtualMachineRunningReason, corev1.EventTypeNormal,
		fmt.Sprintf("The VM is running on Provider %s/p1; TestMachine web is Ready: Provisioned", f.ns))

	// An idle VM and its machine are not written again.
	vmVersion, machineVersion := vm.ResourceVersion, m.ResourceVersion
	time.Sleep(time.Second)
	f.eventuallyVM("web", func(g Gomega, vm *banlieuev1.VirtualMachine) { g.Expect(vm.ResourceVersion).To(Equal(vmVersion)) })
	f.g.Expect(f.machine("web").ResourceVersion).To(Equal(machineVersion))
}

func TestMachineNotReadyYetKeepsTheVMProvisioning(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	p := f.provider("p1", nil, func(p *banlieuev1.Provider) {
		p.Spec.Parameters = map[string]string{testv1.HoldReadyParameter: "true"}
	})
	f.vm("slow", class, image)
	// The provider writes Cloning with the clone's task first, and once it observes the
	// VM the clone made, that nothing waits for a restart (RestartRequired), which the VM
	// mirrors. From then on it writes nothing while the clone runs.
	f.g.Eventually(func(g Gomega) {
		m := f.machine("slow")
		g.Expect(m).NotTo(BeNil())
		g.Expect(m.Status.Conditions).To(ContainElement(And(
			HaveField("Type", banlieuev1.ReadyCondition), HaveField("Reason", "Cloning"))))
		g.Expect(m.Status.Conditions).To(ContainElement(HaveField("Type", infrav1.MachineRestartRequiredCondition)))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	// The machine moving from no Ready condition to Cloning, one step under way to
	// another, neither wakes nor changes the VM: it stays not Ready, Provisioning, with
	// the reason it was placed with.
	notReadyYet := func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseProvisioning))
		g.Expect(condition(vm, banlieuev1.VirtualMachineRestartRequiredCondition)).To(HaveField("Reason", infrav1.MachineNoPendingChangeReason))
		for _, t := range []string{banlieuev1.ReadyCondition, banlieuev1.VirtualMachineInfrastructureReadyCondition} {
			c := condition(vm, t)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineMachineNotReadyReason))
			g.Expect(c.Message).To(Equal("waiting for TestMachine slow to be Ready; its own Ready condition names the step under way once its provider has reconciled it"))
		}
	}
	vm := f.eventuallyVM("slow", notReadyYet)
	f.g.Consistently(func(g Gomega) {
		got := &banlieuev1.VirtualMachine{}
		g.Expect(k8s.Get(f.ctx, clientKey(vm), got)).To(Succeed())
		g.Expect(got.ResourceVersion).To(Equal(vm.ResourceVersion), "the VM was written while its machine was Cloning")
		notReadyYet(g, got)
	}, time.Second, 100*time.Millisecond).Should(Succeed())

	f.update(p, func() { p.Spec.Parameters = nil })
	m := f.machine("slow")
	f.update(m, func() { m.Labels = map[string]string{"poke": "1"} }) // the test provider does not watch Providers
	f.eventuallyVM("slow", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
}

func TestPowerStateChangeReachesTheMachine(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("box", class, image)
	f.eventuallyVM("box", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventuallyVM("box", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseStopped))
		g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	m := f.machine("box")
	f.g.Expect(m.Spec.PowerState).To(Equal(banlieuev1.PowerStatePoweredOff))

	// Core recorded that write, so it reads the machine past it while its cache is
	// behind: a watch slow to come back after an API server restart would otherwise
	// let a VM asking for its old power state find the old spec as asked, skip the
	// write, and copy the old status before its provider was told.
	core.mu.Lock()
	k := core.kinds[testv1.GroupVersion.WithKind(provider.MachineKind.Kind)]
	core.mu.Unlock()
	f.g.Expect(k).NotTo(BeNil())
	key := client.ObjectKeyFromObject(m)
	f.g.Expect(k.written.Behind(key, "1")).To(BeTrue(), "a copy from before core's write of the power state is not behind it")
	f.g.Expect(k.written.Behind(key, m.ResourceVersion)).To(BeFalse(), "the machine as it is now is behind core's write")
}

func TestNoCandidateNamesEveryProviderAndWhy(t *testing.T) {
	f := newFixture(t)
	class := f.class("c", func(c *banlieuev1.VMClass) { c.Spec.Features = []string{"gpu"} })
	image := f.image("i")
	f.provider("a-paused", nil, func(p *banlieuev1.Provider) { p.Spec.Paused = ptr.To(true) })
	f.provider("b-unclaimed", nil, func(p *banlieuev1.Provider) {
		p.Status.MachineKind = banlieuev1.MachineKind{}
	})
	f.provider("c-nogpu", nil)
	f.provider("d-notready", nil, func(p *banlieuev1.Provider) {
		p.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "Unreachable", Message: "connection refused", LastTransitionTime: metav1.Now()}}
	})
	f.vm("nowhere", class, image)
	vm := f.eventuallyVM("nowhere", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineNoCandidateReason))
	})
	msg := condition(vm, banlieuev1.VirtualMachineScheduledCondition).Message
	for _, want := range []string{
		f.ns + "/a-paused: paused",
		f.ns + "/c-nogpu: feature \"gpu\" is not in its capabilities",
		f.ns + "/d-notready: not Ready (connection refused)",
	} {
		f.g.Expect(msg).To(ContainSubstring(want))
	}
	f.g.Expect(msg).To(ContainSubstring(f.ns + "/b-unclaimed"))
	f.g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseScheduling))
	f.g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(f.machine("nowhere")).To(BeNil())
}

func TestMissingClassIsReported(t *testing.T) {
	f := newFixture(t)
	image := f.image("i")
	f.provider("p1", nil)
	f.vm("orphan", &banlieuev1.VMClass{ObjectMeta: metav1.ObjectMeta{Name: f.name("absent")}}, image)
	f.eventuallyVM("orphan", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineClassNotFoundReason))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhasePending), "a VM waiting for its class is Pending")
	})
	// Creating the class later schedules the VM: the class watch finds it.
	f.class("absent")
	f.scheduledOn("orphan", "p1", "")
}

func TestNamespaceSelectorAdmitsOnlyMatchingNamespaces(t *testing.T) {
	f := newFixture(t, "team", "blue")
	class, image := f.class("c"), f.image("i")
	f.provider("red-only", nil, func(p *banlieuev1.Provider) {
		p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "red"}}
	})
	f.provider("blue-ok", nil, func(p *banlieuev1.Provider) {
		p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}
	})
	f.vm("v", class, image)
	f.scheduledOn("v", "blue-ok", "")
}

func TestFailureDomainSelector(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", []banlieuev1.FailureDomain{builder.FailureDomain("fd-a", "zone", "a"), builder.FailureDomain("fd-b", "zone", "b")})
	f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.Placement.FailureDomainSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}
	})
	f.scheduledOn("v", "p1", "fd-b")
}

func TestRequiredAntiAffinityComparesTopologyValuesAndExcludesTheVMItself(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	// fd-a1 and fd-a2 share zone a; fd-b is alone in zone b.
	f.provider("p1", []banlieuev1.FailureDomain{builder.FailureDomain("fd-a1", "zone", "a"), builder.FailureDomain("fd-a2", "zone", "a"), builder.FailureDomain("fd-b", "zone", "b")})
	anti := func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.Placement.AntiAffinity = []banlieuev1.AntiAffinityTerm{{
			TopologyKey: "zone", Mode: banlieuev1.AntiAffinityRequired,
			LabelSelector: &banlieuev1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		}}
	}
	f.vm("db-1", class, image, anti)
	first := f.eventuallyVM("db-1", func(g Gomega, vm *banlieuev1.VirtualMachine) { g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue()) })
	f.vm("db-2", class, image, anti)
	second := f.eventuallyVM("db-2", func(g Gomega, vm *banlieuev1.VirtualMachine) { g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue()) })
	zone := func(fd string) string { return map[string]string{"fd-a1": "a", "fd-a2": "a", "fd-b": "b"}[fd] }
	f.g.Expect(zone(first.Status.Scheduled.FailureDomain)).NotTo(Equal(zone(second.Status.Scheduled.FailureDomain)))

	// A third VM has nowhere to go: both zones are taken.
	f.vm("db-3", class, image, anti)
	vm := f.eventuallyVM("db-3", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	})
	f.g.Expect(condition(vm, banlieuev1.VirtualMachineScheduledCondition).Message).To(ContainSubstring("required anti-affinity on zone="))
	// The placed VMs stay valid: a VM never conflicts with itself.
	f.eventuallyVM("db-1", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachinePlacementValidCondition).Status).To(Equal(metav1.ConditionTrue))
	})
}

func TestPreferredAntiAffinityAndSpreadAcrossFailureDomains(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", []banlieuev1.FailureDomain{builder.FailureDomain("fd-a", "host", "h1"), builder.FailureDomain("fd-b", "host", "h2")})
	pref := func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.Placement.AntiAffinity = []banlieuev1.AntiAffinityTerm{{
			TopologyKey: "host", Mode: banlieuev1.AntiAffinityPreferred,
			LabelSelector: &banlieuev1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		}}
	}
	f.vm("a", class, image, pref)
	f.scheduledOn("a", "p1", "fd-a") // name order breaks the tie
	f.vm("b", class, image, pref)
	f.scheduledOn("b", "p1", "fd-b") // preferred anti-affinity
	f.vm("c", class, image, pref)
	f.eventuallyVM("c", func(g Gomega, vm *banlieuev1.VirtualMachine) { g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue()) }) // preferred only: still placed

	// Without anti-affinity, VMs spread to the failure domain with the fewest VMs.
	g := newFixture(t)
	gc, gi := g.class("c"), g.image("i")
	g.provider("p1", []banlieuev1.FailureDomain{builder.FailureDomain("fd-a"), builder.FailureDomain("fd-b"), builder.FailureDomain("fd-c")})
	for _, n := range []string{"s1", "s2", "s3"} {
		g.vm(n, gc, gi, func(vm *banlieuev1.VirtualMachine) { vm.Labels = nil })
		g.eventuallyVM(n, func(gm Gomega, vm *banlieuev1.VirtualMachine) {
			gm.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue())
		})
	}
	seen := map[string]bool{}
	for _, n := range []string{"s1", "s2", "s3"} {
		seen[g.scheduledOnAny(n)] = true
	}
	g.g.Expect(seen).To(HaveLen(3), "three VMs over three empty failure domains take one each")
}

func (f *fixture) scheduledOnAny(name string) string {
	return f.eventuallyVM(name, func(g Gomega, vm *banlieuev1.VirtualMachine) { g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue()) }).Status.Scheduled.FailureDomain
}

func TestPlacementIsStickyWhenABetterProviderAppears(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("m-first", nil)
	f.vm("v1", class, image)
	f.vm("v2", class, image)
	f.scheduledOn("v1", "m-first", "")
	f.scheduledOn("v2", "m-first", "")
	f.provider("a-new", nil) // empty and first in name order
	time.Sleep(time.Second)
	f.scheduledOn("v1", "m-first", "")
	f.scheduledOn("v2", "m-first", "")
}

// onOldOfTwoProviders places a VM with policy on Provider "old" while "new" also exists.
func onOldOfTwoProviders(t *testing.T, policy banlieuev1.MigrationPolicy) (*fixture, *banlieuev1.VirtualMachine) {
	t.Helper()
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("old", nil)
	f.provider("new", nil)
	vm := f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.MigrationPolicy = policy
		vm.Spec.Placement.ProviderSelector.MatchLabels["name"] = "old"
	})
	f.scheduledOn("v", "old", "")
	return f, vm
}

// moveToNew points the VM's selector at the fixture's Provider "new".
func moveToNew(f *fixture, vm *banlieuev1.VirtualMachine) {
	f.update(vm, func() {
		vm.Spec.Placement.ProviderSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"suite": f.ns, "name": "new"}}
	})
}

func TestSelectorChangeUnderEachMigrationPolicy(t *testing.T) {
	t.Run("automatic deletes the old machine, waits for it and places the VM anew", func(t *testing.T) {
		f, vm := onOldOfTwoProviders(t, banlieuev1.MigrationPolicyAutomatic)
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		})
		// Hold the old machine's deletion so the Migrating phase can be seen.
		m := f.machine("v")
		f.update(m, func() { m.Annotations = map[string]string{testv1.HoldDeletionAnnotation: ""} })
		moveToNew(f, vm)
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseMigrating))
			g.Expect(vm.Status.Scheduled.ProviderName).To(Equal("old"))
		})
		f.update(m, func() { delete(m.Annotations, testv1.HoldDeletionAnnotation) })
		f.scheduledOn("v", "new", "")
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		})
		f.g.Expect(f.machine("v").Spec.ProviderRef.Name).To(Equal("new"))
	})
	t.Run("manual waits for the migrate annotation", func(t *testing.T) {
		f, vm := onOldOfTwoProviders(t, banlieuev1.MigrationPolicyManual)
		moveToNew(f, vm)
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			c := condition(vm, banlieuev1.VirtualMachinePlacementValidCondition)
			g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineWaitingForMigrateApprovalReason))
			g.Expect(c.Message).To(ContainSubstring("banlieue.io/migrate=true"))
		})
		f.g.Expect(f.machine("v").Spec.ProviderRef.Name).To(Equal("old"))
		f.update(vm, func() { vm.Annotations = map[string]string{banlieuev1.MigrateAnnotation: "true"} })
		f.scheduledOn("v", "new", "")
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			g.Expect(vm.Annotations).NotTo(HaveKey(banlieuev1.MigrateAnnotation), "the approval is used up")
		})
	})
	t.Run("never keeps the old machine and reports PlacementValid=False", func(t *testing.T) {
		f, vm := onOldOfTwoProviders(t, banlieuev1.MigrationPolicyNever)
		moveToNew(f, vm)
		f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
			c := condition(vm, banlieuev1.VirtualMachinePlacementValidCondition)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachinePlacementInvalidReason))
			g.Expect(c.Message).To(ContainSubstring("not selected by placement.providerSelector"))
		})
		f.scheduledOn("v", "old", "")
		f.g.Expect(f.machine("v").Spec.ProviderRef.Name).To(Equal("old"))
	})
}

func TestProviderDeletedMovesItsVMs(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	gone := f.provider("a-gone", nil)
	f.vm("v", class, image)
	f.scheduledOn("v", "a-gone", "")
	f.provider("b-stays", nil)
	f.g.Expect(k8s.Delete(f.ctx, gone)).To(Succeed())
	f.scheduledOn("v", "b-stays", "")
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
}

func TestDeletionWaitsForTheMachine(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	m := f.machine("v")
	f.update(m, func() { m.Annotations = map[string]string{testv1.HoldDeletionAnnotation: ""} })
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseDeleting))
		g.Expect(f.machine("v").DeletionTimestamp).NotTo(BeNil())
	})
	time.Sleep(500 * time.Millisecond)
	f.eventuallyVM("v", func(Gomega, *banlieuev1.VirtualMachine) {}) // still there while the machine is held
	f.update(m, func() { delete(m.Annotations, testv1.HoldDeletionAnnotation) })
	f.g.Eventually(func() bool {
		return k8s.Get(f.ctx, clientKey(vm), &banlieuev1.VirtualMachine{}) != nil
	}, 10*time.Second).Should(BeTrue())
	f.g.Expect(f.machine("v")).To(BeNil())
}

func TestPausedVMIsLeftAloneAndSaysSo(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) { vm.Spec.Paused = ptr.To(true) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		paused := condition(vm, banlieuev1.VirtualMachinePausedCondition)
		g.Expect(paused).NotTo(BeNil(), "a paused VM has a Paused condition")
		g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(paused.Message).To(ContainSubstring("spec.paused is true"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhasePending))
		g.Expect(vm.Status.ObservedGeneration).To(BeZero(), "a paused VM was not reconciled")
	})
	time.Sleep(time.Second)
	got := f.eventuallyVM("v", func(Gomega, *banlieuev1.VirtualMachine) {})
	f.g.Expect(got.Status.Scheduled.IsDefined()).To(BeFalse())
	f.g.Expect(f.machine("v")).To(BeNil())
	f.update(vm, func() { vm.Spec.Paused = ptr.To(false) })
	f.scheduledOn("v", "p1", "")
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachinePausedCondition).Status).To(Equal(metav1.ConditionFalse))
	})
}

func TestAVMOnAPausedProviderSaysItIsPaused(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	p := f.provider("p1", nil)
	f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(condition(vm, banlieuev1.VirtualMachinePausedCondition).Status).To(Equal(metav1.ConditionFalse))
	})
	f.update(p, func() { p.Spec.Paused = ptr.To(true) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		paused := condition(vm, banlieuev1.VirtualMachinePausedCondition)
		g.Expect(paused.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(paused.Message).To(Equal("the infrastructure machine is paused: Provider " + f.ns + "/p1 is paused (spec.paused)"))
	})
	f.update(p, func() { p.Spec.Paused = ptr.To(false) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachinePausedCondition).Status).To(Equal(metav1.ConditionFalse))
	})
}

func TestAMachineWhoseProviderGaveUpMakesItsVMFailedUntilItIsFixed(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.update(image, func() { image.Spec.Sources[0].Ref = provider.MissingTemplate })
	f.provider("p1", nil)
	f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseFailed))
		ready := condition(vm, banlieuev1.ReadyCondition)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(infrav1.MachineTemplateNotFoundReason))
		g.Expect(ready.Message).To(ContainSubstring(provider.MissingTemplate))
	})
	// The image's source is corrected: core writes the new ref to the machine, whose
	// provider tries again, and the VM runs.
	f.update(image, func() { image.Spec.Sources[0].Ref = "ubuntu-tpl" })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
}

func TestPausingAVMPausesItsMachineUntilItIsUnpaused(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	marked := func() bool {
		_, ok := f.machine("v").Annotations[infrav1.PausedAnnotation]
		return ok
	}
	f.g.Expect(marked()).To(BeFalse())
	f.update(vm, func() { vm.Spec.Paused = ptr.To(true) })
	f.g.Eventually(marked, 10*time.Second).Should(BeTrue(), "the paused VM's machine carries %s", infrav1.PausedAnnotation)
	f.update(vm, func() { vm.Spec.Paused = ptr.To(false) })
	f.g.Eventually(marked, 10*time.Second).Should(BeFalse(), "the unpaused VM's machine still carries %s", infrav1.PausedAnnotation)
}

func TestAnUnhealthyOrPausedProviderKeepsItsVMs(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	p := f.provider("b-home", nil)
	f.vm("v", class, image)
	f.scheduledOn("v", "b-home", "")
	f.provider("a-other", nil)
	f.g.Eventually(func() error {
		if err := k8s.Get(f.ctx, clientKey(p), p); err != nil {
			return err
		}
		p.Status.Conditions[0].Status = metav1.ConditionFalse
		p.Status.Conditions[0].Reason = "Unreachable"
		return k8s.Status().Update(f.ctx, p)
	}, 10*time.Second).Should(Succeed())
	f.update(p, func() { p.Spec.Paused = ptr.To(true) })
	time.Sleep(time.Second)
	vm := f.scheduledOn("v", "b-home", "")
	f.g.Expect(condition(vm, banlieuev1.VirtualMachinePlacementValidCondition).Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(f.machine("v").Spec.ProviderRef.Name).To(Equal("b-home"))
}

func TestARecordedPlacementWithoutAMachineIsCompletedNotRedone(t *testing.T) {
	// A controller that died after recording the placement and before creating the
	// machine left exactly this behind; its successor must finish the job on "b",
	// although a fresh decision would pick "a" (name order).
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("a", nil)
	f.provider("b", nil)
	vm := f.vm("v", class, image, func(vm *banlieuev1.VirtualMachine) { vm.Spec.Paused = ptr.To(true) })
	f.g.Eventually(func() error { // the controller adds its finalizer meanwhile
		if err := k8s.Get(f.ctx, clientKey(vm), vm); err != nil {
			return err
		}
		vm.Status.Scheduled = banlieuev1.ScheduledPlacement{ProviderNamespace: f.ns, ProviderName: "b", ProviderClass: "test", ScheduledAt: ptr.To(metav1.Now())}
		vm.Status.InfrastructureRef = banlieuev1.ContractVersionedObjectReference{APIGroup: testv1.GroupVersion.Group, Kind: "TestMachine", Name: "v"}
		return k8s.Status().Update(f.ctx, vm)
	}, 10*time.Second).Should(Succeed())
	f.update(vm, func() { vm.Spec.Paused = ptr.To(false) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	f.g.Expect(f.machine("v").Spec.ProviderRef.Name).To(Equal("b"))
	// The placement's Scheduled Event was never recorded; the machine's creation is an
	// Event of its own.
	f.expectEvent("v", banlieuev1.VirtualMachineMachineCreatedReason, corev1.EventTypeNormal, "Created TestMachine v on Provider "+f.ns+"/b")
	f.g.Expect(f.events(f.g, "v")).NotTo(HaveKey(banlieuev1.VirtualMachineScheduledReason))
}

func TestAPlacedVMWhoseClassIsDeletedKeepsItsMachineAndSaysWhy(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.provider("p1", nil)
	vm := f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	f.g.Expect(k8s.Delete(f.ctx, class)).To(Succeed())
	// The VM runs on its copy of the class: it stays Ready, and ClassApplied says why
	// it is built from the copy.
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachineClassAppliedCondition).Reason).To(Equal(banlieuev1.VirtualMachineClassNotFoundReason))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})

	// A VM placed before classes were recorded has no copy: its Ready condition says
	// what is missing, and it keeps its machine.
	f.update(vm, func() { vm.Spec.Paused = ptr.To(true) })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachinePausedCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	f.g.Expect(k8s.Status().Patch(f.ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"status":{"appliedClass":null}}`)))).To(Succeed())
	f.update(vm, func() { vm.Spec.Paused = nil })
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		ready := condition(vm, banlieuev1.ReadyCondition)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(banlieuev1.VirtualMachineClassNotFoundReason))
		g.Expect(ready.Message).To(Equal("VMClass " + class.Name + " does not exist; create it, or set spec.classRef to a class that exists"))
		g.Expect(condition(vm, banlieuev1.VirtualMachineClassAppliedCondition).Message).To(Equal(ready.Message))
		g.Expect(condition(vm, banlieuev1.VirtualMachineScheduledCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	f.g.Expect(f.machine("v")).NotTo(BeNil())
	f.g.Expect(f.machine("v").DeletionTimestamp).To(BeNil())
}
