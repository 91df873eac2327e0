package proxmox

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// Observe polls the machine's recorded task, finds the machine's VM (by reading its
// config where the machine's status says it is, else by listing the cluster;
// confirmed by its config's description either way) and reports its state: power
// from the VM's current status, addresses from the guest agent. When the VM is not
// found, a clone that may be making it is reported as the task in flight (see
// pendingClone). It never changes PVE. What it read goes to Observation.State for
// the Create, Update or Delete that follows. An adopting machine's VM is the one its
// spec.adoptProviderID names (see observeAdopting).
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	state, err := s.pollTask(ctx, m.Task)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if state == taskEnded && m.Task.Operation == providersdk.OperationDelete {
		s.sawDestroyed(m, m.Task.Ref)
	}
	if m.Spec.Adopts() {
		// The VM is the one the ID names, never one this driver cloned or looks for.
		return s.observeAdopting(ctx, m, state)
	}
	if state == taskRunning && m.Task.Operation == providersdk.OperationClone {
		return inFlightClone(m.Task), nil
	}
	// A VM destroyed between the reads of one look (by its deletion task, say) is
	// looked for once more, and then found gone.
	for range 2 {
		vm, all, clone, err := s.search(ctx, m)
		switch {
		case err != nil:
			return providersdk.Observation{}, err
		case clone != "":
			return inFlightClone(task(clone, providersdk.OperationClone)), nil
		case vm == nil:
			o := providersdk.Observation{State: &observed{guests: all}}
			if state == taskRunning {
				// No VM yet or any more, and the machine's task runs: a seed's upload
				// before the clone, a seed's removal after the VM is destroyed. It is
				// waited for, so neither is started twice.
				o.Task = m.Task
			}
			return o, nil
		}
		o, err := s.observe(ctx, m, vm)
		if pve.IsNotFound(err) {
			continue
		}
		if err != nil {
			return providersdk.Observation{}, err
		}
		if state == taskRunning {
			o.Task = m.Task
		}
		return o, nil
	}
	return providersdk.Observation{}, fmt.Errorf("failed to observe the VM of machine %s/%s: it vanished twice while it was read", m.Namespace, m.Name)
}

// search finds the machine's VM (see find). When it is not found, it returns the
// listing it is not in, or the UPID of a clone in flight that may be making it; when
// such a clone ended after the listing was read, it lists the cluster again and looks
// there (see pendingClone).
func (s *session) search(ctx context.Context, m *providersdk.Machine) (*vmState, []pve.Resource, string, error) {
	vm, all, err := s.find(ctx, m)
	if err != nil || vm != nil {
		return vm, nil, "", err
	}
	clones, err := s.pendingClone(ctx, m, all)
	switch {
	case err != nil:
		return nil, nil, "", err
	case clones.running != "":
		return nil, nil, clones.running, nil
	case !clones.ended:
		return nil, all, "", nil
	}
	if all, err = s.api.Resources(ctx); err != nil {
		return nil, nil, "", err
	}
	vm, err = s.findIn(ctx, all, m)
	if err != nil || vm != nil {
		return vm, nil, "", err
	}
	return nil, all, "", nil
}

// inFlightClone is the observation of a clone in flight that is, or may be, making
// the machine's VM, which carries no identity until the clone ends: it exists as far
// as the Reconciler is concerned, so a machine deleted now waits for it instead of
// leaving it behind, and a machine being created waits for it instead of cloning again.
func inFlightClone(t providersdk.Task) providersdk.Observation {
	return providersdk.Observation{Exists: true, Task: t}
}

// observe builds the observation of an existing VM.
func (s *session) observe(ctx context.Context, m *providersdk.Machine, vm *vmState) (providersdk.Observation, error) {
	power, running, pid, err := s.powerState(ctx, vm)
	if err != nil {
		return providersdk.Observation{}, err
	}
	o := providersdk.Observation{
		Exists:        true,
		ProviderID:    s.providerID(vm.VMID),
		PowerState:    power,
		FailureDomain: vm.Node,
		Details:       &infrav1.ProxmoxStatus{Node: vm.Node, VMID: int32(vm.VMID)},
		State:         &observed{vm: vm, power: power, running: running},
	}
	if power == banlieuev1.PowerStatePoweredOn {
		o.BootID = bootID(vm.Node, pid)
		if o.Addresses, err = s.addresses(ctx, vm); err != nil {
			return providersdk.Observation{}, err
		}
		o.WaitingForGuest = len(o.Addresses) == 0
	}
	hw := hardware(vm.conf, vm.conf.DiskKeys())
	o.Hardware = &hw
	ch, err := s.changes(m, vm, power)
	if err != nil && !providersdk.IsPermanent(err) {
		return providersdk.Observation{}, err
	}
	if err == nil {
		o.PendingRestart = ch.pendingRestart()
	}
	// A change PVE cannot make is not up to date either: Update reports why.
	o.UpToDate = err == nil && ch.empty() && power == m.DesiredPower() && vm.Lock == ""
	return o, nil
}

// powerState reads a VM's power state, whether its QEMU process runs (paused
// included) and that process's PID: the current status tells a paused VM from a
// running one, which the cluster's listing does not.
func (s *session) powerState(ctx context.Context, vm *vmState) (banlieuev1.PowerState, bool, int, error) {
	if vm.conf["lock"] == "suspended" {
		return banlieuev1.PowerStateSuspended, false, 0, nil // hibernated to disk
	}
	st, err := s.api.CurrentStatus(ctx, vm.Node, vm.VMID)
	switch {
	case err != nil:
		return "", false, 0, err
	case !st.Running():
		return banlieuev1.PowerStatePoweredOff, false, 0, nil
	case st.QMPStatus == "paused" || st.QMPStatus == "suspended":
		return banlieuev1.PowerStateSuspended, true, st.PID, nil
	}
	return banlieuev1.PowerStatePoweredOn, true, st.PID, nil
}

// bootID is the boot ID of a VM whose QEMU process on node has pid: every start (a
// power-on, a stop and start, a migration) runs a new QEMU process, so a new PID, or
// another node. status/current's uptime is not part of it: it is whole seconds counted
// to the moment of the read, so the start time it gives moves by a second from one
// read to the next, and a boot ID must not change while the VM runs. The PID alone
// repeats only if the node's PID counter wrapped round to the same number between a
// stop and the next start (pid_max is 4194304 on PVE's kernels); a restart would then
// power the VM off once more, never loop. A PVE that reports no PID (0) gives no boot
// ID, and its restarts are Unsupported.
func bootID(node string, pid int) string {
	if pid <= 0 {
		return ""
	}
	return fmt.Sprintf("%s/qemu-%d", node, pid)
}

// addresses asks the guest agent for the guest's addresses, without loopback,
// link-local or duplicate ones. Before the agent runs PVE answers an error: the guest
// has no address yet, which is not a failure.
func (s *session) addresses(ctx context.Context, vm *vmState) ([]banlieuev1.MachineAddress, error) {
	if on := pve.ParseProperty(vm.conf["agent"]).First; on != "1" && on != "enabled=1" {
		return nil, nil
	}
	all, err := s.api.AgentAddresses(ctx, vm.Node, vm.VMID)
	if err != nil {
		if providersdk.IsUnreachable(err) || providersdk.IsUnauthorized(err) {
			return nil, err
		}
		return nil, nil // "QEMU guest agent is not running": not yet
	}
	var out []banlieuev1.MachineAddress
	seen := map[string]bool{}
	for _, a := range all {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		out = append(out, banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: ip.String()})
	}
	return out, nil
}

// Delete stops the VM Observe found, then destroys it with its disks (purge=1,
// destroy-unreferenced-disks=1) and its user-data snippet, each as a task; once the
// VM is gone (or when there never was one), it removes the machine's seed ISOs, which
// PVE keeps as they are not the VM's own volumes (see deleteSeeds). It succeeds when
// the VM and its seeds are gone. A clone that may be making the VM is Observe's
// concern: it reports it in flight, and the Reconciler waits for it.
func (s *session) Delete(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
	st, err := stateOf(obs, "delete")
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	if st.vm == nil {
		upid, err := s.deleteSeeds(ctx, m)
		if err != nil || upid == "" {
			return providersdk.DeleteResult{}, err
		}
		return providersdk.DeleteResult{Task: task(upid, providersdk.OperationDelete)}, nil
	}
	vm := st.vm
	if st.running {
		upid, err := s.api.Stop(ctx, vm.Node, vm.VMID)
		if err != nil {
			if pve.IsNotFound(err) {
				return providersdk.DeleteResult{}, nil // destroyed meanwhile
			}
			return providersdk.DeleteResult{}, err
		}
		return providersdk.DeleteResult{Task: task(upid, providersdk.OperationDelete)}, nil
	}
	if err := s.deleteSnippet(ctx, vm); err != nil {
		return providersdk.DeleteResult{}, err
	}
	upid, err := s.api.Delete(ctx, vm.Node, vm.VMID, pve.DeleteOptions{Purge: true, DestroyUnreferencedDisks: true})
	if err != nil {
		if pve.IsNotFound(err) {
			return providersdk.DeleteResult{}, nil
		}
		return providersdk.DeleteResult{}, err
	}
	return providersdk.DeleteResult{Task: task(upid, providersdk.OperationDelete)}, nil
}

var _ providersdk.Releaser = (*session)(nil)

// Release removes the machine's tag and banlieue's description lines from the observed
// VM in one config update, guarded by the config's digest, and changes nothing else:
// the user's other tags and notes, power, disks, the seed image and the user-data
// snippet stay. Observe then no longer finds the VM for the machine, which it finds by
// that tag and the UID in the description. It is idempotent.
func (s *session) Release(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.ReleaseResult, error) {
	st, err := stateOf(obs, "release")
	if err != nil || st.vm == nil {
		return providersdk.ReleaseResult{}, err
	}
	vm := st.vm
	tags := unmarkTags(vm.conf.Tags(), m)
	desc := withoutOwnLines(vm.conf["description"])
	if len(tags) == len(vm.conf.Tags()) && desc == vm.conf["description"] {
		return providersdk.ReleaseResult{}, nil
	}
	ch := pve.ConfigChange{Set: map[string]any{}, Digest: vm.conf["digest"]}
	if strings.TrimSpace(desc) == "" {
		ch.Delete = append(ch.Delete, "description")
	} else {
		ch.Set["description"] = desc
	}
	if len(tags) == 0 {
		ch.Delete = append(ch.Delete, "tags")
	} else {
		ch.Set["tags"] = pve.JoinTags(tags)
	}
	if err := s.api.SetConfig(ctx, vm.Node, vm.VMID, ch); err != nil && !pve.IsNotFound(err) {
		return providersdk.ReleaseResult{}, err
	}
	return providersdk.ReleaseResult{}, nil
}
