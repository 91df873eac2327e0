package vsphere

import (
	"context"
	"errors"
	"net/netip"
	"time"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// Observe finds the machine's VM by its instance UUID and reports its state, reading the
// VM in one property collector call; the VM it read travels in Observation.State to the
// Create, Update or Delete that follows. It polls the machine's recorded task first. It
// never changes vCenter.
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	running, err := s.pollTask(ctx, m)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if running && m.Task.Operation == providersdk.OperationClone {
		// The clone is making the VM, which may be half-made: it exists as far as the
		// reconciler is concerned, so a machine deleted now waits for it instead of
		// leaving it behind. Until the clone ends, a poll is this one task read.
		return providersdk.Observation{Exists: true, Task: m.Task}, nil
	}
	vm, err := s.findVM(ctx, m)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if vm == nil || released(vm, m) {
		return providersdk.Observation{}, nil
	}
	if err := checkIdentity(vm, m); err != nil {
		return providersdk.Observation{}, err
	}
	if isShutdown(m.Task) && vm.Power == vcenter.PoweredOn && !m.Task.TimedOut(s.driver.now(), s.driver.shutdownTimeout) {
		running = true
	}
	o := s.observe(ctx, m, vm)
	if running {
		o.Task = m.Task
	}
	return o, nil
}

// observe builds the observation of an existing VM.
func (s *session) observe(ctx context.Context, m *providersdk.Machine, vm *vcenter.VM) providersdk.Observation {
	o := providersdk.Observation{
		Exists:     true,
		PowerState: powerState(vm.Power),
		Addresses:  addresses(vm),
		Details:    &infrav1.VSphereStatus{MoRef: vm.Ref.Value, InstanceUUID: vm.InstanceUUID},
		State:      vm,
	}
	o.ProviderID = providerID(vm)
	if o.PowerState == banlieuev1.PowerStatePoweredOn && !vm.BootTime.IsZero() {
		// vCenter sets the boot time on every power-on, and only then (a guest reboot
		// keeps it): the VM's boot ID.
		o.BootID = vm.BootTime.UTC().Format(time.RFC3339Nano)
	}
	o.WaitingForGuest = o.PowerState == banlieuev1.PowerStatePoweredOn && len(o.Addresses) == 0
	o.FailureDomain = s.domainOfHost(ctx, vm.Host)
	changes := providersdk.HardwareDiff(m.Spec, hardware(vm))
	pending := providersdk.PendingChanges(changes, o.PowerState, m.DesiredPower(), func(c providersdk.HardwareChange) bool { return onlineChange(vm, c) })
	o.PendingRestart = providersdk.Descriptions(pending)
	o.UpToDate = o.PowerState == m.DesiredPower() && len(changes) == len(pending)
	return o
}

// observedVM is the VM Observe read, which the Reconciler hands back in obs.State.
func observedVM(obs providersdk.Observation) (*vcenter.VM, error) {
	vm, ok := obs.State.(*vcenter.VM)
	if !ok || vm == nil {
		return nil, errors.New("failed to find the VM in the observation: Observe must come first in the reconcile")
	}
	return vm, nil
}

// hardware is the VM's shape, for providersdk.HardwareDiff.
func hardware(vm *vcenter.VM) providersdk.Hardware {
	return providersdk.Hardware{CPUs: vm.CPUs, MemoryMiB: vm.MemoryMiB, DiskBytes: vm.DiskBytes}
}

// providerID is the VM's spec.providerID, "vsphere://<config.uuid>"; "" while the VM
// has no UUID.
func providerID(vm *vcenter.VM) string {
	if vm.UUID == "" {
		return ""
	}
	return "vsphere://" + vm.UUID
}

// powerState maps vSphere's power state.
func powerState(p vcenter.PowerState) banlieuev1.PowerState {
	switch p {
	case vcenter.PoweredOn:
		return banlieuev1.PowerStatePoweredOn
	case vcenter.Suspended:
		return banlieuev1.PowerStateSuspended
	}
	return banlieuev1.PowerStatePoweredOff
}

// addresses are the guest's IP addresses, the primary one first, without duplicates or
// link-local addresses (which are of no use outside the link).
func addresses(vm *vcenter.VM) []banlieuev1.MachineAddress {
	var out []banlieuev1.MachineAddress
	seen := map[string]bool{}
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsLoopback() {
			return
		}
		a := ip.String()
		if !seen[a] {
			seen[a] = true
			out = append(out, banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: a})
		}
	}
	add(vm.GuestIP)
	for _, nic := range vm.GuestNICs {
		for _, ip := range nic {
			add(ip)
		}
	}
	return out
}

// Delete powers the observed VM off, then destroys it, each as a task. It succeeds when
// the VM is already gone.
func (s *session) Delete(ctx context.Context, _ *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
	if !obs.Exists {
		return providersdk.DeleteResult{}, nil
	}
	if obs.Task.InFlight() {
		// A clone still making the VM, or a step that has not ended: wait for it.
		return providersdk.DeleteResult{}, providersdk.InFlight(obs.Task.Operation, obs.Task.Ref)
	}
	vm, err := observedVM(obs)
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	if vm.Template {
		return providersdk.DeleteResult{}, providersdk.Permanent(infrav1.MachineFailedReason,
			"VM %q (%s) has become a template; banlieue does not delete templates", vm.Name, vm.Ref.Value)
	}
	if vm.Power != vcenter.PoweredOff {
		ref, err := s.vc.PowerOff(ctx, vm)
		if err != nil {
			return providersdk.DeleteResult{}, err
		}
		return providersdk.DeleteResult{Task: task(ref, providersdk.OperationDelete)}, nil
	}
	ref, err := s.vc.Destroy(ctx, vm)
	if vcenter.IsNotFound(err) {
		return providersdk.DeleteResult{}, nil
	}
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	return providersdk.DeleteResult{Task: task(ref, providersdk.OperationDelete)}, nil
}

var _ providersdk.Releaser = (*session)(nil)

// released reports whether vm, found by the machine's instance UUID, is one a Release
// let go: the machine is deleted under deletionPolicy Retain and the VM no longer
// carries its UID in extraConfig. The instance UUID stays, so without this the VM would
// read as a clone still in flight (checkIdentity) and be waited for forever.
func released(vm *vcenter.VM, m *providersdk.Machine) bool {
	return m.Releasing() && vm.Identity != string(m.UID)
}

// Release removes the machine's UID from the observed VM's extraConfig, in one
// reconfigure task, and changes nothing else: power, disks, guest info and the instance
// UUID stay. Observe then no longer reports the VM for the machine (see released). A
// VM that no longer carries the UID needs nothing.
func (s *session) Release(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.ReleaseResult, error) {
	if obs.Task.InFlight() {
		return providersdk.ReleaseResult{}, providersdk.InFlight(obs.Task.Operation, obs.Task.Ref)
	}
	vm, err := observedVM(obs)
	if err != nil {
		return providersdk.ReleaseResult{}, err
	}
	if vm.Identity != string(m.UID) {
		return providersdk.ReleaseResult{}, nil
	}
	ref, err := s.vc.RemoveExtraConfig(ctx, vm, ExtraConfigMachineUID)
	if vcenter.IsNotFound(err) {
		return providersdk.ReleaseResult{}, nil
	}
	if err != nil {
		return providersdk.ReleaseResult{}, err
	}
	return providersdk.ReleaseResult{Task: task(ref, providersdk.OperationRelease)}, nil
}
