package virtualmachine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
)

// The tests of section 1 of docs/proposals/20261204-day-2-operations.md: the VM records
// the class it was given, takes a new one only by the one rule, and refuses, without
// touching its machine, a class it cannot take where it runs.

// running waits until the VM is Running with its class recorded, then until its status
// is written no more, and returns it.
func (f *fixture) running(name string) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := f.eventuallyVM(name, func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vm.Status.AppliedClass.IsDefined()).To(BeTrue())
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	f.g.Eventually(func(g Gomega) {
		before := vm.ResourceVersion
		time.Sleep(300 * time.Millisecond)
		g.Expect(k8s.Get(f.ctx, clientKey(vm), vm)).To(Succeed())
		g.Expect(vm.ResourceVersion).To(Equal(before))
	}, 10*time.Second).Should(Succeed())
	return vm
}

// hardware is the part of a machine's spec a class sets.
func hardware(m infrav1.MachineSpec) infrav1.MachineSpec {
	return infrav1.MachineSpec{Hardware: m.Hardware, Disks: m.Disks, Interfaces: m.Interfaces}
}

// classApplied waits until the VM's ClassApplied condition has reason and returns the VM.
func (f *fixture) classApplied(name, reason string) *banlieuev1.VirtualMachine {
	f.t.Helper()
	return f.eventuallyVM(name, func(g Gomega, vm *banlieuev1.VirtualMachine) {
		c := condition(vm, banlieuev1.VirtualMachineClassAppliedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(vm.Generation))
	})
}

func TestClassRefChangeResizesTheMachine(t *testing.T) {
	f := newFixture(t)
	small, image := f.class("small"), f.image("i")
	big := f.class("big", builder.WithHardware(4, 8192), builder.WithDisks(
		banlieuev1.Disk{Name: "root", SizeGiB: 40, StorageClass: "fast"},
		banlieuev1.Disk{Name: "data", SizeGiB: 10, StorageClass: "fast", Provisioning: banlieuev1.DiskProvisioningThick},
	))
	f.provider("p1", nil)
	vm := f.vm("web", small, image)
	got := f.running("web")
	f.g.Expect(got.Status.AppliedClass).To(Equal(banlieuev1.AppliedClass{
		Name: small.Name, Generation: 1, Hardware: small.Spec.Hardware, Network: small.Spec.Network, Firmware: banlieuev1.FirmwareBIOS,
	}))
	machineUID := f.machine("web").UID

	f.update(vm, func() { vm.Spec.ClassRef.Name = big.Name })
	target := map[string]string{"datastore": "ds-p1"}
	f.g.Eventually(func() infrav1.MachineSpec { return hardware(f.machine("web").Spec.MachineSpec) }, 10*time.Second).Should(Equal(infrav1.MachineSpec{
		Hardware: infrav1.MachineHardware{CPUs: 4, MemoryMiB: 8192, Firmware: banlieuev1.FirmwareBIOS},
		Disks: []infrav1.MachineDisk{
			{Name: "root", SizeGiB: 40, Provisioning: banlieuev1.DiskProvisioningThin, StorageClass: "fast", Target: target},
			{Name: "data", SizeGiB: 10, Provisioning: banlieuev1.DiskProvisioningThick, StorageClass: "fast", Target: target},
		},
		Interfaces: []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: map[string]string{"portgroup": "pg-p1"}}},
	}))
	got = f.classApplied("web", banlieuev1.VirtualMachineClassAppliedReason)
	f.g.Expect(got.Status.AppliedClass.Name).To(Equal(big.Name))
	f.g.Expect(got.Status.AppliedClass.Generation).To(Equal(int64(1)))
	f.g.Expect(got.Status.AppliedClass.Hardware.Disks).To(HaveLen(2))
	f.g.Expect(condition(got, banlieuev1.VirtualMachineClassAppliedCondition).Message).To(Equal(
		fmt.Sprintf("the machine is built from VMClass %s at generation 1, as recorded in status.appliedClass", big.Name)))
	f.expectEvent("web", banlieuev1.VirtualMachineResizedReason, corev1.EventTypeNormal,
		fmt.Sprintf("Resizing from VMClass %s generation 1 to VMClass %s generation 1", small.Name, big.Name))
	f.g.Expect(f.machine("web").UID).To(Equal(machineUID), "a resize keeps the machine")
	f.g.Expect(got.Status.Scheduled.ProviderName).To(Equal("p1"))
}

func TestVMClassEditReachesOnlyVMsThatFollow(t *testing.T) {
	for _, tt := range []struct {
		name     string
		policy   banlieuev1.ClassUpdatePolicy
		wantCPUs int32
	}{
		{name: "A Pinned VM (the default) keeps its copy: its machine is unchanged and its status not written.", wantCPUs: 2},
		{name: "A VM that follows its class is resized to the class's new generation.", policy: banlieuev1.ClassUpdatePolicyFollow, wantCPUs: 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			class, image := f.class("c"), f.image("i")
			f.provider("p1", nil)
			f.vm("box", class, image, builder.WithClassUpdatePolicy(tt.policy))
			vm := f.running("box")
			m := f.machine("box")

			f.update(class, func() { class.Spec.Hardware.CPUs = 8 })
			f.g.Expect(class.Generation).To(Equal(int64(2)))
			if tt.policy != banlieuev1.ClassUpdatePolicyFollow {
				f.g.Expect(vm.Spec.ClassUpdatePolicy).To(Equal(banlieuev1.ClassUpdatePolicyPinned), "Pinned is the default")
				f.g.Consistently(func(g Gomega) {
					got := &banlieuev1.VirtualMachine{}
					g.Expect(k8s.Get(f.ctx, clientKey(vm), got)).To(Succeed())
					g.Expect(got.ResourceVersion).To(Equal(vm.ResourceVersion), "the VM's status was written")
					g.Expect(f.machine("box").ResourceVersion).To(Equal(m.ResourceVersion), "the machine was written")
				}, 2*time.Second, 100*time.Millisecond).Should(Succeed())
				f.g.Expect(vm.Status.AppliedClass.Generation).To(Equal(int64(1)))
				return
			}
			f.g.Eventually(func() int32 { return f.machine("box").Spec.Hardware.CPUs }, 10*time.Second).Should(Equal(tt.wantCPUs))
			f.eventuallyVM("box", func(g Gomega, vm *banlieuev1.VirtualMachine) {
				g.Expect(vm.Status.AppliedClass.Generation).To(Equal(int64(2)))
				g.Expect(vm.Status.AppliedClass.Hardware.CPUs).To(Equal(tt.wantCPUs))
			})
		})
	}
}

func TestClassRefusedWhereTheVMRuns(t *testing.T) {
	withData := func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.Disks = append(c.Spec.Hardware.Disks, banlieuev1.Disk{Name: "data", SizeGiB: 10, StorageClass: "fast"})
	}
	gold := func(p *banlieuev1.Provider) {
		builder.WithStorageClass("gold", map[string]string{"datastore": "gold"})(p)
	}
	tests := []struct {
		name string
		// class and providerMods make the VM's first class and its Provider; domains are
		// the Provider's failure domains.
		class        []func(*banlieuev1.VMClass)
		providerMods []func(*banlieuev1.Provider)
		domains      []banlieuev1.FailureDomain
		follow       bool
		// next changes a copy of the class for the new class; with follow it edits the
		// class itself. notCreated names the new class and never creates it; deleteClass
		// deletes the VM's class instead.
		next        func(*banlieuev1.VMClass)
		notCreated  bool
		deleteClass bool
		reason      string
		// message is part of ClassApplied's message, with {class} for the class's name
		// and {ns} for the test's namespace.
		message string
	}{
		{
			name:    "A class with a smaller disk is refused: DiskShrinkRefused.",
			next:    func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].SizeGiB = 10 },
			reason:  banlieuev1.VirtualMachineDiskShrinkRefusedReason,
			message: "VMClass {class}-next cannot be applied: disk root would shrink from 20 GiB to 10 GiB (disks only grow); the VM keeps VMClass {class} at generation 1, as recorded in status.appliedClass: change VMClass {class}-next, or set spec.classRef back to {class}",
		},
		{
			name:    "An edit that shrinks a disk of a class the VM follows is refused: DiskShrinkRefused.",
			follow:  true,
			next:    func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].SizeGiB = 10 },
			reason:  banlieuev1.VirtualMachineDiskShrinkRefusedReason,
			message: "generation 2 of VMClass {class} cannot be applied: disk root would shrink from 20 GiB to 10 GiB (disks only grow); the VM keeps generation 1, as recorded in status.appliedClass: undo the edit, or set spec.classUpdatePolicy to Pinned",
		},
		{
			name:    "A class without one of the VM's disks is refused: ResizeUnsupported.",
			class:   []func(*banlieuev1.VMClass){withData},
			next:    func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks = c.Spec.Hardware.Disks[:1] },
			reason:  banlieuev1.VirtualMachineResizeUnsupportedReason,
			message: "disk data is no longer disk 2 of the class (a disk cannot be removed, renamed or moved; add new disks after the existing ones)",
		},
		{
			name:         "A class moving a disk to another storage class is refused: ResizeUnsupported.",
			providerMods: []func(*banlieuev1.Provider){gold},
			next:         func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].StorageClass = "gold" },
			reason:       banlieuev1.VirtualMachineResizeUnsupportedReason,
			message:      "disk root would move from storage class fast to gold (a disk's storage class cannot change)",
		},
		{
			name:    "A class changing a disk's provisioning is refused: ResizeUnsupported.",
			next:    func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].Provisioning = banlieuev1.DiskProvisioningThick },
			reason:  banlieuev1.VirtualMachineResizeUnsupportedReason,
			message: "disk root would change its provisioning from thin to thick (a disk's provisioning cannot change)",
		},
		{
			name:    "A class with another firmware is refused: ResizeUnsupported.",
			next:    func(c *banlieuev1.VMClass) { c.Spec.Firmware = banlieuev1.FirmwareEFI },
			reason:  banlieuev1.VirtualMachineResizeUnsupportedReason,
			message: "the firmware would change from bios to efi (the firmware cannot change)",
		},
		{
			name:    "A class with other network interfaces is refused: ResizeUnsupported.",
			next:    func(c *banlieuev1.VMClass) { c.Spec.Network.Interfaces[0].MTU = 9000 },
			reason:  banlieuev1.VirtualMachineResizeUnsupportedReason,
			message: "the network interfaces would change from [eth0 on prod] to [eth0 on prod (mtu 9000)] (interfaces cannot change on an existing VM)",
		},
		{
			name:    "A class whose new disk's storage class the Provider does not offer is refused: ResizeDoesNotFit.",
			next:    func(c *banlieuev1.VMClass) { withData(c); c.Spec.Hardware.Disks[1].StorageClass = "gold" },
			reason:  banlieuev1.VirtualMachineResizeDoesNotFitReason,
			message: `it does not fit where the VM runs (Provider {ns}/p1: storage class "gold" (disk data) is not in its capabilities), and a resize never moves a VM`,
		},
		{
			name:         "A class whose new disk's storage class the VM's failure domain lacks is refused: ResizeDoesNotFit.",
			providerMods: []func(*banlieuev1.Provider){gold},
			domains: []banlieuev1.FailureDomain{{Name: "fd-a", Attributes: banlieuev1.FailureDomainAttributes{
				AvailableStorageClasses: []string{"fast"},
			}}},
			next:    func(c *banlieuev1.VMClass) { withData(c); c.Spec.Hardware.Disks[1].StorageClass = "gold" },
			reason:  banlieuev1.VirtualMachineResizeDoesNotFitReason,
			message: `it does not fit where the VM runs (Provider {ns}/p1 failure domain fd-a: storage class "gold" is not available), and a resize never moves a VM`,
		},
		{
			name:        "A deleted class leaves the VM running on its copy: ClassNotFound.",
			deleteClass: true,
			reason:      banlieuev1.VirtualMachineClassNotFoundReason,
			message:     "VMClass {class} does not exist any more; the VM keeps running on its copy of generation 1 in status.appliedClass: create the class again, or set spec.classRef to another class to resize the VM",
		},
		{
			name:       "A classRef naming no VMClass leaves the VM running on its copy: ClassNotFound.",
			next:       func(*banlieuev1.VMClass) {},
			notCreated: true,
			reason:     banlieuev1.VirtualMachineClassNotFoundReason,
			message:    "VMClass {class}-next does not exist; the VM keeps VMClass {class} at generation 1, as recorded in status.appliedClass: create VMClass {class}-next, or set spec.classRef back to {class}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			class, image := f.class("c", tt.class...), f.image("i")
			f.provider("p1", tt.domains, tt.providerMods...)
			var mods []func(*banlieuev1.VirtualMachine)
			if tt.follow {
				mods = append(mods, builder.WithClassUpdatePolicy(banlieuev1.ClassUpdatePolicyFollow))
			}
			vm := f.vm("box", class, image, mods...)
			before := f.running("box")
			m := f.machine("box")

			switch {
			case tt.deleteClass:
				f.g.Expect(k8s.Delete(f.ctx, class)).To(Succeed())
			case tt.follow:
				f.update(class, func() { tt.next(class) })
			default:
				next := builder.VMClass(class.Name+"-next", func(c *banlieuev1.VMClass) { c.Spec = *class.Spec.DeepCopy() })
				tt.next(next)
				if !tt.notCreated {
					f.create(next)
				}
				f.update(vm, func() { vm.Spec.ClassRef.Name = next.Name })
			}

			got := f.classApplied("box", tt.reason)
			c := condition(got, banlieuev1.VirtualMachineClassAppliedCondition)
			f.g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			f.g.Expect(c.Message).To(ContainSubstring(strings.NewReplacer("{class}", class.Name, "{ns}", f.ns).Replace(tt.message)))
			f.g.Expect(got.Status.AppliedClass).To(Equal(before.Status.AppliedClass), "a refused class is not recorded")
			// The machine is not touched, the VM is not moved, and it stays Ready.
			f.g.Consistently(func(g Gomega) {
				got := f.machine("box")
				g.Expect(got.UID).To(Equal(m.UID))
				g.Expect(got.Generation).To(Equal(m.Generation))
				g.Expect(got.Spec).To(Equal(m.Spec))
			}, time.Second, 100*time.Millisecond).Should(Succeed())
			got = f.eventuallyVM("box", func(g Gomega, vm *banlieuev1.VirtualMachine) {
				g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
				g.Expect(condition(vm, banlieuev1.VirtualMachinePlacementValidCondition).Status).To(Equal(metav1.ConditionTrue))
			})
			f.g.Expect(got.Status.Scheduled).To(Equal(before.Status.Scheduled))
			f.g.Expect(f.events(f.g, "box")).NotTo(HaveKey(banlieuev1.VirtualMachineResizedReason))
		})
	}
}

func TestRecordedClassIsAppliedAfterACrash(t *testing.T) {
	f := newFixture(t)
	vm, big := f.runningSmallWithBigClass("box")

	// Core stops between recording big and applying it to the machine: here it leaves
	// the paused VM alone while its spec and status are written as core would have.
	f.update(vm, func() { vm.Spec.Paused = ptr.To(true) })
	f.eventuallyVM("box", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachinePausedCondition).Status).To(Equal(metav1.ConditionTrue))
	})
	f.update(vm, func() { vm.Spec.ClassRef.Name = big.Name })
	recorded := vm.DeepCopy()
	recorded.Status.AppliedClass = banlieuev1.AppliedClass{Name: big.Name, Generation: big.Generation, Hardware: big.Spec.Hardware, Network: big.Spec.Network, Firmware: big.Spec.Firmware}
	f.g.Expect(k8s.Status().Patch(f.ctx, recorded, client.MergeFrom(vm))).To(Succeed())
	// The class is edited after the copy was taken: the VM, Pinned, must get the copy.
	f.update(big, func() { big.Spec.Hardware.CPUs = 6 })
	f.g.Expect(f.machine("box").Spec.Hardware.CPUs).To(Equal(int32(2)))

	f.update(vm, func() { vm.Spec.Paused = nil })
	f.g.Eventually(func() infrav1.MachineHardware { return f.machine("box").Spec.Hardware }, 10*time.Second).Should(
		Equal(infrav1.MachineHardware{CPUs: 4, MemoryMiB: 8192, Firmware: banlieuev1.FirmwareBIOS}))
	got := f.classApplied("box", banlieuev1.VirtualMachineClassAppliedReason)
	f.g.Expect(got.Status.AppliedClass.Generation).To(Equal(int64(1)))
	f.g.Consistently(func() int32 { return f.machine("box").Spec.Hardware.CPUs }, time.Second).Should(Equal(int32(4)))
}

func TestCheckResize(t *testing.T) {
	applied := banlieuev1.AppliedClass{
		Name: "small", Generation: 1,
		Hardware: banlieuev1.Hardware{CPUs: 2, MemoryMiB: 2048, Disks: []banlieuev1.Disk{
			{Name: "root", SizeGiB: 20, StorageClass: "fast", Provisioning: banlieuev1.DiskProvisioningThin},
			{Name: "data", SizeGiB: 10, StorageClass: "fast"},
		}},
		Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
		Firmware: banlieuev1.FirmwareBIOS,
	}
	for _, tt := range []struct {
		name       string
		next       func(*banlieuev1.VMClass)
		wantReason string
		wantWhy    string
	}{
		{name: "The same class is no change.", next: func(*banlieuev1.VMClass) {}},
		{
			name: "CPUs and memory in either direction, features, grown and added disks are a resize.",
			next: func(c *banlieuev1.VMClass) {
				c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB, c.Spec.Features = 1, 8192, []string{"gpu"}
				c.Spec.Hardware.Disks[1].SizeGiB = 100
				c.Spec.Hardware.Disks = append(c.Spec.Hardware.Disks, banlieuev1.Disk{Name: "logs", SizeGiB: 5, StorageClass: "gold"})
			},
		},
		{
			name:       "Unset provisioning and firmware read as their defaults.",
			next:       func(c *banlieuev1.VMClass) { c.Spec.Hardware.Disks[0].Provisioning, c.Spec.Firmware = "", "" },
			wantReason: "",
		},
		{
			name: "Two swapped disks are two moved disks.",
			next: func(c *banlieuev1.VMClass) {
				d := c.Spec.Hardware.Disks
				d[0], d[1] = d[1], d[0]
			},
			wantReason: banlieuev1.VirtualMachineResizeUnsupportedReason,
			wantWhy: "disk root is no longer disk 1 of the class (a disk cannot be removed, renamed or moved; add new disks after the existing ones); " +
				"disk data is no longer disk 2 of the class (a disk cannot be removed, renamed or moved; add new disks after the existing ones)",
		},
		{
			name: "A shrink with an unsupported change is ResizeUnsupported and names both.",
			next: func(c *banlieuev1.VMClass) {
				c.Spec.Hardware.Disks[0].SizeGiB = 10
				c.Spec.Firmware = banlieuev1.FirmwareEFISecure
			},
			wantReason: banlieuev1.VirtualMachineResizeUnsupportedReason,
			wantWhy:    "disk root would shrink from 20 GiB to 10 GiB (disks only grow); the firmware would change from bios to efi-secure (the firmware cannot change)",
		},
		{
			name: "A changed interface address is a change of the interfaces.",
			next: func(c *banlieuev1.VMClass) {
				c.Spec.Network.Interfaces[0].IPAM = &banlieuev1.IPAM{Pool: banlieuev1.PoolIPAM{PoolRef: banlieuev1.LocalObjectReference{Name: "p"}}}
			},
			wantReason: banlieuev1.VirtualMachineResizeUnsupportedReason,
			wantWhy:    "the addresses of the network interfaces [eth0 on prod] would change (interfaces cannot change on an existing VM)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			next := classFromApplied(applied)
			next.Name, next.Generation = "big", 1
			tt.next(next)
			reason, why := checkResize(applied, next)
			g.Expect(reason).To(Equal(tt.wantReason))
			g.Expect(why).To(Equal(tt.wantWhy))
		})
	}
}

func TestAResizeTheBackendCannotMakeOnlineWaitsForTheNextRestartAndTheVMStaysReady(t *testing.T) {
	f := newFixture(t)
	vm, big := f.runningSmallWithBigClass("web")
	uid := f.machine("web").UID
	before, _ := backend.VM(uid)

	// The test backend changes CPUs only while the VM is off: the running VM keeps its
	// CPUs, says what its next restart applies, and stays Ready.
	f.update(vm, func() { vm.Spec.ClassRef.Name = big.Name })
	f.eventuallyVM("web", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		rr := condition(vm, banlieuev1.VirtualMachineRestartRequiredCondition)
		g.Expect(rr).NotTo(BeNil())
		g.Expect(rr.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(rr.Reason).To(Equal(infrav1.MachineHardwareChangePendingReason))
		g.Expect(rr.Message).To(Equal(fmt.Sprintf("the VM's next restart applies CPUs from %d to 4; set spec.restartRequestedAt, or power the VM off and on again", before.CPUs)))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	})
	if got, _ := backend.VM(uid); got.CPUs != before.CPUs || got.Starts != before.Starts {
		t.Fatalf("the running VM was changed before its restart: %+v, was %+v", got, before)
	}

	// One restart applies the change: one power cycle, and nothing waits any more.
	at := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	f.update(vm, func() { vm.Spec.RestartRequestedAt = &at })
	f.eventuallyVM("web", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted))
		rr := condition(vm, banlieuev1.VirtualMachineRestartRequiredCondition)
		g.Expect(rr).NotTo(BeNil())
		g.Expect(rr.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(rr.Reason).To(Equal(infrav1.MachineNoPendingChangeReason))
	})
	got, _ := backend.VM(uid)
	if got.CPUs != 4 || got.Starts != before.Starts+1 || got.PowerOffs != before.PowerOffs+1 {
		t.Fatalf("after the restart the VM is %+v; want 4 CPUs after one power cycle from %+v", got, before)
	}
}

// runningSmallWithBigClass makes a Provider, a VM name of class "small" (the default
// hardware) Running on it, and a class "big" with 4 CPUs and 8 GiB to resize it to.
func (f *fixture) runningSmallWithBigClass(name string) (*banlieuev1.VirtualMachine, *banlieuev1.VMClass) {
	small, image := f.class("small"), f.image("i")
	big := f.class("big", builder.WithHardware(4, 8192))
	f.provider("p1", nil)
	vm := f.vm(name, small, image)
	f.running(name)
	return vm, big
}
