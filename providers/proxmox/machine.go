package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Observe polls the machine's recorded task, finds the machine's VM (by reading its
// config where the machine last saw it, else by listing the cluster; confirmed by its
// config's description either way) and reports its state: power from status/current,
// addresses from the guest agent. It never changes PVE. A listing that did not find
// the VM is kept for the Create of the same reconcile (keepListing).
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	state, err := s.pollTask(ctx, m.Task)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if state == taskRunning && m.Task.Operation == providersdk.OperationClone {
		// The clone is making the VM, which carries no identity until the clone ends:
		// it exists as far as the reconciler is concerned, so a machine deleted now
		// waits for it instead of leaving it behind.
		return providersdk.Observation{Exists: true, Task: m.Task}, nil
	}
	vm, all, err := s.lookup(ctx, m, nil)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if vm == nil {
		s.keepListing(m.UID, all) // for the Create that follows
		return providersdk.Observation{}, nil
	}
	o, err := s.observe(ctx, m, vm)
	if err != nil {
		return providersdk.Observation{}, err
	}
	if state == taskRunning {
		o.Task = m.Task
	}
	return o, nil
}

// observe builds the observation of an existing VM.
func (s *session) observe(ctx context.Context, m *providersdk.Machine, vm *vmState) (providersdk.Observation, error) {
	power, err := s.powerState(ctx, vm)
	if err != nil {
		return providersdk.Observation{}, err
	}
	o := providersdk.Observation{
		Exists:        true,
		ProviderID:    fmt.Sprintf("proxmox://%s/%d", s.cluster, vm.VMID),
		PowerState:    power,
		FailureDomain: vm.Node,
		Details:       &infrav1.ProxmoxStatus{Node: vm.Node, VMID: int32(vm.VMID)},
	}
	if power == banlieuev1.PowerStatePoweredOn {
		if o.Addresses, err = s.addresses(ctx, vm); err != nil {
			return providersdk.Observation{}, err
		}
		o.WaitingForGuest = len(o.Addresses) == 0
	}
	ch, err := s.changes(ctx, m, vm)
	if err != nil && !providersdk.IsPermanent(err) {
		return providersdk.Observation{}, err
	}
	// A change PVE cannot make is not up to date either: Update reports why.
	o.UpToDate = err == nil && ch.empty() && power == desiredPower(m) && vm.Lock == ""
	return o, nil
}

// runState is a VM's state as status/current reports it.
type runState struct {
	// Status is running or stopped; a paused VM is running.
	Status string `json:"status"`
	// QMPStatus also tells running, paused and suspended apart.
	QMPStatus string `json:"qmpstatus"`
}

// current reads a VM's status/current.
func (s *session) current(ctx context.Context, vm *vmState) (runState, error) {
	var st runState
	err := s.get(ctx, vmPath(vm.Node, vm.VMID, "status", "current"), nil, &st)
	return st, err
}

// powerState reads a VM's power state: status/current tells a paused VM from a
// running one, which /cluster/resources does not.
func (s *session) powerState(ctx context.Context, vm *vmState) (banlieuev1.PowerState, error) {
	if vm.conf["lock"] == "suspended" {
		return banlieuev1.PowerStateSuspended, nil // hibernated to disk
	}
	st, err := s.current(ctx, vm)
	if err != nil {
		return "", err
	}
	switch {
	case st.Status != "running":
		return banlieuev1.PowerStatePoweredOff, nil
	case st.QMPStatus == "paused" || st.QMPStatus == "suspended":
		return banlieuev1.PowerStateSuspended, nil
	}
	return banlieuev1.PowerStatePoweredOn, nil
}

// addresses asks the guest agent for the guest's addresses, without loopback,
// link-local or duplicate ones. Before the agent runs PVE answers an error: the guest
// has no address yet, which is not a failure.
func (s *session) addresses(ctx context.Context, vm *vmState) ([]banlieuev1.MachineAddress, error) {
	if on := parseProperty(vm.conf["agent"]).first; on != "1" && on != "enabled=1" {
		return nil, nil
	}
	var res struct {
		Result []struct {
			IPAddresses []struct {
				Address string `json:"ip-address"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	if err := s.get(ctx, vmPath(vm.Node, vm.VMID, "agent", "network-get-interfaces"), nil, &res); err != nil {
		if providersdk.IsUnreachable(err) || providersdk.IsUnauthorized(err) {
			return nil, err
		}
		return nil, nil // "QEMU guest agent is not running": not yet
	}
	var out []banlieuev1.MachineAddress
	seen := map[string]bool{}
	for _, iface := range res.Result {
		for _, a := range iface.IPAddresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || seen[ip.String()] {
				continue
			}
			seen[ip.String()] = true
			out = append(out, banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: ip.String()})
		}
	}
	return out, nil
}

// desiredPower is the machine's power state, PoweredOn when unset.
func desiredPower(m *providersdk.Machine) banlieuev1.PowerState {
	if m.Spec.PowerState == "" {
		return banlieuev1.PowerStatePoweredOn
	}
	return m.Spec.PowerState
}

// Delete stops the machine's VM, then destroys it with its disks (purge=1,
// destroy-unreferenced-disks=1) and its user-data snippet, each as a task. It succeeds
// when the VM is gone, and waits for a clone that may be making it. The VM is found as
// Observe finds it; the cluster is listed only when it is not where the machine last
// saw it.
func (s *session) Delete(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
	state, err := s.pollTask(ctx, m.Task)
	var failed *providersdk.TaskFailedError
	if err != nil && !errors.As(err, &failed) {
		// A failed earlier task does not stop the deletion; not reaching PVE does.
		return providersdk.DeleteResult{}, err
	}
	if state == taskRunning {
		return providersdk.DeleteResult{}, providersdk.InFlight(m.Task.Operation, m.Task.Ref)
	}
	vm, all, err := s.lookup(ctx, m, nil)
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	if vm == nil {
		// Not found, so the cluster was listed: a clone in flight shows as a locked VM.
		upid, err := s.pendingClone(ctx, all, m, 0)
		if err != nil || upid == "" {
			return providersdk.DeleteResult{}, err
		}
		return providersdk.DeleteResult{}, providersdk.InFlight(providersdk.OperationClone, upid)
	}
	st, err := s.current(ctx, vm)
	if err != nil {
		if notFound(err) {
			return providersdk.DeleteResult{}, nil // destroyed meanwhile
		}
		return providersdk.DeleteResult{}, err
	}
	if st.Status == "running" { // paused too
		var upid string
		if err := s.post(ctx, vmPath(vm.Node, vm.VMID, "status", "stop"), nil, &upid); err != nil {
			return providersdk.DeleteResult{}, err
		}
		return providersdk.DeleteResult{Task: task(upid, providersdk.OperationDelete)}, nil
	}
	if err := s.deleteSnippet(ctx, vm); err != nil {
		return providersdk.DeleteResult{}, err
	}
	var upid string
	err = s.del(ctx, vmPath(vm.Node, vm.VMID), map[string]string{"purge": "1", "destroy-unreferenced-disks": "1"}, &upid)
	if err != nil {
		if notFound(err) {
			return providersdk.DeleteResult{}, nil
		}
		return providersdk.DeleteResult{}, err
	}
	return providersdk.DeleteResult{Task: task(upid, providersdk.OperationDelete)}, nil
}

// pendingClone finds a clone in flight that may be making the machine's VM: a VM
// locked by a clone carries no name nor description yet, so a provider that crashed
// after starting a clone cannot tell its clone from another's. Any qmclone task of the
// template (every template when templateVMID is 0) started since the machine was
// created may be it, except those this session started for other machines; its UPID
// is returned, and the caller waits for it rather than clone again. It costs one call,
// made only while some VM is locked by a clone.
func (s *session) pendingClone(ctx context.Context, all []resource, m *providersdk.Machine, templateVMID int) (string, error) {
	locked := false
	for _, r := range all {
		locked = locked || r.Lock == "clone"
	}
	if !locked {
		return "", nil
	}
	var tasks []struct {
		UPID      string `json:"upid"`
		Type      string `json:"type"`
		ID        string `json:"id"`
		StartTime int64  `json:"starttime"`
		EndTime   int64  `json:"endtime"`
		Status    string `json:"status"`
	}
	if err := s.get(ctx, "/cluster/tasks", nil, &tasks); err != nil {
		return "", err
	}
	var since int64
	if m.Object != nil {
		if c := m.Object.GetCreationTimestamp(); !c.IsZero() {
			// PVE's clock and the API server's may differ a little.
			since = c.Add(-time.Minute).Unix()
		}
	}
	for _, t := range tasks {
		running := t.EndTime == 0 && (t.Status == "" || t.Status == "RUNNING")
		if !running || t.Type != "qmclone" || t.StartTime < since {
			continue
		}
		if templateVMID != 0 && t.ID != fmt.Sprint(templateVMID) {
			continue
		}
		if owner, ok := s.cloneOwner(t.UPID); ok && owner != m.UID {
			continue // this session's clone for another machine
		}
		return t.UPID, nil
	}
	return "", nil
}

// startedClone is a clone task this session started: the machine it makes a VM for,
// and where that VM is.
type startedClone struct {
	uid k8stypes.UID
	loc location
}

// cloneStarted records a clone task this session started for the machine uid, making
// its VM at loc.
func (s *session) cloneStarted(upid string, uid k8stypes.UID, loc location) {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	s.clones[upid] = startedClone{uid: uid, loc: loc}
}

// cloneEnded forgets a task once it is seen to have ended.
func (s *session) cloneEnded(upid string) {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	delete(s.clones, upid)
}

// cloneOwner is the machine a clone task this session started makes a VM for.
func (s *session) cloneOwner(upid string) (k8stypes.UID, bool) {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	c, ok := s.clones[upid]
	return c.uid, ok
}
