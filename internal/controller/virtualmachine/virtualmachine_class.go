package virtualmachine

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/placement"
)

// Which class a VM's machine is built from (docs/proposals/20261204-day-2-operations.md,
// section 1). The VM records the copy it was given in status.appliedClass and is built
// from that copy; it takes the VMClass as it is now only when it has no copy yet, when
// spec.classRef names another class, or when classUpdatePolicy is Follow and the class's
// generation moved on. A new class is checked against the copy before it is recorded,
// and recorded before the machine is changed.

// chooseClass returns the class the VM's machine is built from, and sets the VM's
// ClassApplied condition. live is the VMClass spec.classRef names, nil when it does not
// exist (the VM then has a copy: reconcileNormal stops earlier for one without). A new
// class for a placed VM is recorded with a conditional status write before it is
// returned, so that a core killed before applying the machine applies it next time; for
// a VM not placed yet the placement's own write records it.
func (r *Reconciler) chooseClass(ctx context.Context, s *scope, live *banlieuev1.VMClass, sched *placement.Scheduler) (*banlieuev1.VMClass, error) {
	vm := s.vm
	applied := vm.Status.AppliedClass
	switch {
	case live == nil:
		setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, false, banlieuev1.VirtualMachineClassNotFoundReason, classNotFoundMessage(vm))
		return classFromApplied(applied), nil
	case applied.IsDefined() && !takesLiveClass(vm, live):
		setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, true, banlieuev1.VirtualMachineClassAppliedReason, appliedMessage(applied))
		return classFromApplied(applied), nil
	}
	// A VM not placed yet has no disks to keep; a placed VM from before classes were
	// recorded is taken to run its class as it is now.
	if applied.IsDefined() && vm.Status.Scheduled.IsDefined() {
		if reason, why := checkResize(applied, live); reason != "" {
			setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, false, reason, refusedMessage(vm, live, why))
			return classFromApplied(applied), nil
		}
		if why := sched.FitsClass(live, locationOf(vm)); why != "" {
			setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, false, banlieuev1.VirtualMachineResizeDoesNotFitReason,
				refusedMessage(vm, live, fmt.Sprintf("it does not fit where the VM runs (%s), and a resize never moves a VM", why)))
			return classFromApplied(applied), nil
		}
	}
	vm.Status.AppliedClass = appliedClassOf(live)
	setCondition(vm, banlieuev1.VirtualMachineClassAppliedCondition, true, banlieuev1.VirtualMachineClassAppliedReason, appliedMessage(vm.Status.AppliedClass))
	if !vm.Status.Scheduled.IsDefined() {
		return live, nil
	}
	// Conditional on the VM's resourceVersion: a reconcile working from a stale copy
	// fails here instead of recording a class over a newer decision, and the Event that
	// follows the write is recorded once.
	if err := r.patchStatus(ctx, s, true); err != nil {
		return nil, err
	}
	if applied.IsDefined() {
		r.event(vm, corev1.EventTypeNormal, banlieuev1.VirtualMachineResizedReason, "Resize",
			"Resizing from VMClass %s generation %d to VMClass %s generation %d", applied.Name, applied.Generation, live.Name, live.Generation)
	}
	return live, nil
}

// takesLiveClass reports whether the VM takes its VMClass as it is now instead of the
// copy in status.appliedClass: spec.classRef names another class, or the VM follows
// its class and the class's generation moved on.
func takesLiveClass(vm *banlieuev1.VirtualMachine, live *banlieuev1.VMClass) bool {
	applied := vm.Status.AppliedClass
	return vm.Spec.ClassRef.Name != applied.Name ||
		(vm.Spec.ClassUpdatePolicy == banlieuev1.ClassUpdatePolicyFollow && live.Generation != applied.Generation)
}

// checkResize compares the new class next with the applied copy and returns why a VM
// running the copy cannot take it: DiskShrinkRefused, or ResizeUnsupported when any
// change is one an existing VM cannot take at all, with every problem in class order.
// It returns "" when the change is a resize: CPUs, memory and features change freely
// (placement checks features), disks grow, and new disks come after the existing ones.
func checkResize(applied banlieuev1.AppliedClass, next *banlieuev1.VMClass) (reason, why string) {
	var problems []string
	unsupported := false
	refuse := func(unsupportedChange bool, format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
		unsupported = unsupported || unsupportedChange
	}
	disks := next.Spec.Hardware.Disks
	// Disks are matched by position, as drivers match them to the backend's disks.
	for i, had := range applied.Hardware.Disks {
		if i >= len(disks) || disks[i].Name != had.Name {
			refuse(true, "disk %s is no longer disk %d of the class (a disk cannot be removed, renamed or moved; add new disks after the existing ones)", had.Name, i+1)
			continue
		}
		d := disks[i]
		if d.StorageClass != had.StorageClass {
			refuse(true, "disk %s would move from storage class %s to %s (a disk's storage class cannot change)", had.Name, had.StorageClass, d.StorageClass)
		}
		if provisioning(d.Provisioning) != provisioning(had.Provisioning) {
			refuse(true, "disk %s would change its provisioning from %s to %s (a disk's provisioning cannot change)", had.Name, provisioning(had.Provisioning), provisioning(d.Provisioning))
		}
		if d.SizeGiB < had.SizeGiB {
			refuse(false, "disk %s would shrink from %d GiB to %d GiB (disks only grow)", had.Name, had.SizeGiB, d.SizeGiB)
		}
	}
	if from, to := firmware(applied.Firmware), firmware(next.Spec.Firmware); from != to {
		refuse(true, "the firmware would change from %s to %s (the firmware cannot change)", from, to)
	}
	if !equality.Semantic.DeepEqual(applied.Network, next.Spec.Network) {
		if from, to := interfaces(applied.Network), interfaces(next.Spec.Network); from != to {
			refuse(true, "the network interfaces would change from %s to %s (interfaces cannot change on an existing VM)", from, to)
		} else {
			refuse(true, "the addresses of the network interfaces %s would change (interfaces cannot change on an existing VM)", from)
		}
	}
	switch {
	case len(problems) == 0:
		return "", ""
	case unsupported:
		return banlieuev1.VirtualMachineResizeUnsupportedReason, strings.Join(problems, "; ")
	}
	return banlieuev1.VirtualMachineDiskShrinkRefusedReason, strings.Join(problems, "; ")
}

// appliedMessage is ClassApplied's message while the VM runs the copy it has. It does
// not depend on the live class, so that an edit of a class the VM does not take
// writes nothing.
func appliedMessage(applied banlieuev1.AppliedClass) string {
	return fmt.Sprintf("the machine is built from VMClass %s at generation %d, as recorded in status.appliedClass", applied.Name, applied.Generation)
}

// refusedMessage says that the VM refused the class next, why, what it keeps and how to
// go on.
func refusedMessage(vm *banlieuev1.VirtualMachine, next *banlieuev1.VMClass, why string) string {
	applied := vm.Status.AppliedClass
	if next.Name != applied.Name {
		return fmt.Sprintf("VMClass %s cannot be applied: %s; the VM keeps VMClass %s at generation %d, as recorded in status.appliedClass: change VMClass %s, or set spec.classRef back to %s",
			next.Name, why, applied.Name, applied.Generation, next.Name, applied.Name)
	}
	return fmt.Sprintf("generation %d of VMClass %s cannot be applied: %s; the VM keeps generation %d, as recorded in status.appliedClass: undo the edit, or set spec.classUpdatePolicy to Pinned",
		next.Generation, next.Name, why, applied.Generation)
}

// classNotFoundMessage says that the VMClass spec.classRef names does not exist and the
// VM runs on its copy.
func classNotFoundMessage(vm *banlieuev1.VirtualMachine) string {
	applied, name := vm.Status.AppliedClass, vm.Spec.ClassRef.Name
	if name != applied.Name {
		return fmt.Sprintf("VMClass %s does not exist; the VM keeps VMClass %s at generation %d, as recorded in status.appliedClass: create VMClass %s, or set spec.classRef back to %s",
			name, applied.Name, applied.Generation, name, applied.Name)
	}
	return fmt.Sprintf("VMClass %s does not exist any more; the VM keeps running on its copy of generation %d in status.appliedClass: create the class again, or set spec.classRef to another class to resize the VM",
		name, applied.Generation)
}

// appliedClassOf is the copy of class that the VM records.
func appliedClassOf(class *banlieuev1.VMClass) banlieuev1.AppliedClass {
	spec := class.Spec.DeepCopy()
	return banlieuev1.AppliedClass{
		Name:       class.Name,
		Generation: class.Generation,
		Hardware:   spec.Hardware,
		Network:    spec.Network,
		Firmware:   spec.Firmware,
		Features:   spec.Features,
	}
}

// classFromApplied is the VMClass that the copy applied stands for, with its name and
// generation.
func classFromApplied(applied banlieuev1.AppliedClass) *banlieuev1.VMClass {
	c := applied.DeepCopy()
	return &banlieuev1.VMClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Generation: c.Generation},
		Spec: banlieuev1.VMClassSpec{
			Hardware: c.Hardware, Network: c.Network, Firmware: c.Firmware, Features: c.Features,
		},
	}
}

// provisioning and firmware read an unset value as its API default.
func provisioning(p banlieuev1.DiskProvisioning) banlieuev1.DiskProvisioning {
	return cmp.Or(p, banlieuev1.DiskProvisioningThin)
}

func firmware(f banlieuev1.Firmware) banlieuev1.Firmware { return cmp.Or(f, banlieuev1.FirmwareBIOS) }

// interfaces lists a network's interfaces for a message, e.g. [eth0 on prod, eth1 on
// backup (mtu 9000, ipam static)].
func interfaces(n banlieuev1.Network) string {
	out := make([]string, 0, len(n.Interfaces))
	for _, i := range n.Interfaces {
		var details []string
		if i.MTU != 0 {
			details = append(details, fmt.Sprintf("mtu %d", i.MTU))
		}
		if i.IPAM != nil && i.IPAM.Source != "" {
			details = append(details, "ipam "+string(i.IPAM.Source))
		}
		desc := i.Name + " on " + i.NetworkClass
		if len(details) > 0 {
			desc += " (" + strings.Join(details, ", ") + ")"
		}
		out = append(out, desc)
	}
	return "[" + strings.Join(out, ", ") + "]"
}
