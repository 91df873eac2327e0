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
// Create, Update, Delete, Release or Adopt that follows. The VM of an adopting machine is
// found by its BIOS UUID instead (observeAdopted). It polls the machine's recorded task
// first. It never changes vCenter.
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	running, made, err := s.pollTask(ctx, m)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if running && m.Task.Operation == providersdk.OperationClone {
		// The clone is making the VM, which may be half-made: it exists as far as the
		// reconciler is concerned, so a machine deleted now waits for it instead of
		// leaving it behind. Until the clone ends, a poll is this one task read.
		return providersdk.Observation{Exists: true, Task: m.Task}, nil
	}
	if m.Spec.Adopts() {
		return s.observeAdopted(ctx, m, running)
	}
	vm, err := s.findVM(ctx, m, made)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if vm == nil || released(vm, m) {
		// A task still running is reported whatever is found, so that the Reconciler
		// waits for it: a Destroy_Task can unregister the VM before it has deleted the
		// VM's files (vcsim's does).
		return providersdk.Observation{Task: runningTask(m, running)}, nil
	}
	if err := checkIdentity(vm, m); err != nil {
		return providersdk.Observation{}, err
	}
	if s.shuttingDown(m, vm) {
		running = true
	}
	o := s.observe(ctx, m, vm)
	o.Task = runningTask(m, running)
	return o, nil
}

// runningTask is the machine's recorded task when it is still running, and no task
// otherwise: what an Observation reports in flight.
func runningTask(m *providersdk.Machine, running bool) providersdk.Task {
	if running {
		return m.Task
	}
	return providersdk.Task{}
}

// observeAdopted reports the VM an adopting machine's spec.adoptProviderID names, found
// by its BIOS UUID (adoptedVM): its own (it carries the machine's UID) as any machine's
// VM; one without a mark as Exists and Unclaimed, for Adopt to claim; one with another
// machine's UID as AlreadyManaged. A template, or a VM outside the Provider's datacenter
// and folder, is refused. For a deleted machine only its own VM is there: one never
// claimed, another's, or one a Release let go (deletionPolicy Retain) is not. A task
// still running is reported whatever is found, so that the Reconciler waits for it.
func (s *session) observeAdopted(ctx context.Context, m *providersdk.Machine, running bool) (providersdk.Observation, error) {
	vm, err := s.adoptedVM(ctx, m)
	if err != nil {
		return providersdk.Observation{}, err
	}
	inFlight := runningTask(m, running)
	id := m.Spec.AdoptProviderID
	mine := vm != nil && vm.Identity == string(m.UID)
	switch {
	case vm == nil, m.Deleting && !mine:
		return providersdk.Observation{Task: inFlight}, nil
	case vm.Template:
		return providersdk.Observation{}, providersdk.AdoptionTargetInvalid(id, "it is a template")
	}
	if !mine {
		// Only a VM to claim is checked: the machine's own passed the check when it
		// claimed it, and looking again would cost a Locate call on every reconcile.
		if err := s.checkScope(ctx, id, vm); err != nil {
			if vcenter.IsNotFound(err) {
				return providersdk.Observation{Task: inFlight}, nil // deleted since it was read
			}
			return providersdk.Observation{}, err
		}
	}
	if vm.Identity != "" {
		// The claim race is over: a claim made now reads this mark and stops.
		s.claims.forget(vm.Ref)
	}
	switch {
	case vm.Identity == "":
		return providersdk.Observation{
			Exists:     true,
			Unclaimed:  true,
			ProviderID: providerID(vm),
			PowerState: powerState(vm.Power),
			Task:       inFlight,
			State:      vm,
		}, nil
	case !mine:
		return providersdk.Observation{}, providersdk.AlreadyManaged(id)
	}
	if s.shuttingDown(m, vm) {
		inFlight = m.Task
	}
	o := s.observe(ctx, m, vm)
	o.Task = inFlight
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
	hw := hardware(vm)
	o.Hardware = &hw
	changes := providersdk.HardwareDiff(m.Spec, hw)
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
	return providerIDPrefix + vm.UUID
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
// read as a clone still in flight (checkIdentity) and be waited for forever. An adopted
// VM, found by its BIOS UUID, is a deleted machine's only while it carries the UID (see
// observeAdopted), which covers a release as well.
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
	ref, err := s.vc.RemoveExtraConfig(ctx, vm, append([]string{ExtraConfigMachineUID}, markKeys...)...)
	if vcenter.IsNotFound(err) {
		return providersdk.ReleaseResult{}, nil
	}
	if err != nil {
		return providersdk.ReleaseResult{}, err
	}
	return providersdk.ReleaseResult{Task: task(ref, providersdk.OperationRelease)}, nil
}

var _ providersdk.Adopter = (*session)(nil)

// ProviderIDPrefix is "vsphere://", which starts every provider ID of the driver. A
// BIOS UUID names no vCenter, so every vSphere Provider publishes the same prefix.
func (s *session) ProviderIDPrefix() string { return providerIDPrefix }

// Adopt claims the VM Observe found unclaimed for the machine: one ReconfigVM task
// writes the machine's mark to its extraConfig (ExtraConfigMachineUID and markKeys) and changes
// nothing else: power, hardware, the instance UUID and the BIOS UUID stay. The
// reconfiguration names the config.changeVersion Observe read, so that vCenter refuses
// it when the VM changed since (ConcurrentAccess): of two claims of one VM, one wins.
// Within the session the claim reads the mark again under the VM's claim lock first,
// and waits for a claim task started before it, so that two machines of one process
// cannot both claim where vCenter does not check (vcsim). A VM that carries the
// machine's UID already needs nothing; one that carries another's is AlreadyManaged.
func (s *session) Adopt(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.AdoptResult, error) {
	if obs.Task.InFlight() {
		return providersdk.AdoptResult{}, providersdk.InFlight(obs.Task.Operation, obs.Task.Ref)
	}
	vm, err := observedVM(obs)
	if err != nil {
		return providersdk.AdoptResult{}, err
	}
	cl, unlock := s.claims.lock(vm.Ref)
	defer unlock()
	if cl.task != "" {
		// The mark of a claim this session started is readable only once its task ends.
		info, err := s.vc.PollTask(ctx, cl.task)
		if err != nil {
			return providersdk.AdoptResult{}, err
		}
		if info.State == vcenter.TaskRunning {
			return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
		}
		cl.task = ""
	}
	identity, err := s.vc.Identity(ctx, vm.Ref)
	if vcenter.IsNotFound(err) {
		// Deleted since Observe: the next Observe says so.
		return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
	}
	if err != nil {
		return providersdk.AdoptResult{}, err
	}
	switch identity {
	case string(m.UID):
		return providersdk.AdoptResult{}, nil
	case "":
	default:
		return providersdk.AdoptResult{}, providersdk.AlreadyManaged(m.Spec.AdoptProviderID)
	}
	ref, err := s.vc.SetExtraConfig(ctx, vm, mark(m))
	if vcenter.IsConcurrentAccess(err) || vcenter.IsNotFound(err) {
		// The VM changed, or went, since Observe read it: the next Observe reads it again.
		return providersdk.AdoptResult{}, providersdk.InFlight(providersdk.OperationAdopt, "")
	}
	if err != nil {
		return providersdk.AdoptResult{}, err
	}
	cl.task = ref
	return providersdk.AdoptResult{Task: task(ref, providersdk.OperationAdopt)}, nil
}
