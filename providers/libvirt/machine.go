package libvirt

import (
	"context"
	"net/netip"
	"slices"

	"github.com/google/uuid"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// MetadataNamespace is the XML namespace of the element banlieue keeps in a domain's
// <metadata>: the machine's identity and the volumes it created.
const MetadataNamespace = host.MetadataNamespace

// shutdownTaskPrefix starts the task reference recorded for a guest shutdown, which
// libvirt does not track: "shutdown:<domain UUID>/<boot ID>" (shutdownTask). Observe
// reports it in flight while the domain runs the boot it was asked of and the shutdown
// timeout has not passed; Update then destroys it. A domain that runs another boot has
// shut down since: a restart's power cycle is over as soon as it starts again, not
// when the timeout ends.
const shutdownTaskPrefix = "shutdown:"

// shutdownTask is the task reference of a shutdown of dom's current boot.
func shutdownTask(dom *host.Domain) string { return shutdownTaskPrefix + dom.UUID + "/" + dom.BootID }

// machineUUID is the domain UUID of a machine: its UID, which Kubernetes makes a UUID.
func machineUUID(m *providersdk.Machine) (string, error) {
	u, err := uuid.Parse(string(m.UID))
	if err != nil {
		return "", providersdk.Permanent(infrav1.MachineFailedReason, "the machine's UID %q is not a UUID", m.UID)
	}
	return u.String(), nil
}

// findDomain looks the machine's domain up by UUID; nil when there is none. A domain
// with the UUID whose banlieue metadata does not name the machine is refused.
func (s *session) findDomain(ctx context.Context, m *providersdk.Machine) (*host.Domain, error) {
	id, err := machineUUID(m)
	if err != nil {
		return nil, err
	}
	dom, err := s.host.FindDomain(ctx, id)
	if host.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if released(m, dom) {
		return nil, nil
	}
	return dom, checkIdentity(m, dom)
}

// released reports whether dom, found by the machine's UUID, is one a Release let go:
// the machine is deleted under deletionPolicy Retain and the domain's banlieue metadata
// no longer names it. Without this, the domain would be an IdentityMismatch.
func released(m *providersdk.Machine, dom *host.Domain) bool {
	return m.Releasing() && (dom.Metadata == nil || dom.Metadata.UID != string(m.UID))
}

var _ providersdk.Releaser = (*session)(nil)

// Release removes banlieue's element from the observed domain's metadata, live and in
// its definition, and nothing else: the domain keeps running (or not) with its disks,
// seed image and volumes, which no Delete will remove any more. Observe then no longer
// reports the domain for the machine (see released). It is idempotent.
func (s *session) Release(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.ReleaseResult, error) {
	dom := domainOf(obs)
	if dom == nil || released(m, dom) {
		return providersdk.ReleaseResult{}, nil
	}
	err := s.host.RemoveMetadata(ctx, dom)
	if host.IsNotFound(err) {
		return providersdk.ReleaseResult{}, nil
	}
	return providersdk.ReleaseResult{}, err
}

// checkIdentity refuses a domain with the machine's UUID whose banlieue metadata does
// not name the machine: it is someone else's, and left alone.
func checkIdentity(m *providersdk.Machine, dom *host.Domain) error {
	if dom.Metadata != nil && dom.Metadata.UID == string(m.UID) {
		return nil
	}
	got := "<none>"
	if dom.Metadata != nil {
		got = dom.Metadata.UID
	}
	return providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
		"domain %q has this machine's UUID but its banlieue metadata names UID %s, not the machine's; it is left alone", dom.Name, got)
}

// domainOf is the domain Observe found, which it hands to Create, Update and Delete in
// obs.State; nil when there is none.
func domainOf(obs providersdk.Observation) *host.Domain {
	dom, _ := obs.State.(*host.Domain)
	return dom
}

// Observe finds the machine's domain by its UUID, or an adopting machine's by its
// adoptProviderID (observeAdopting), and reports its state and addresses; the domain
// itself is obs.State. It never changes the host.
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	if m.Spec.Adopts() {
		return s.observeAdopting(ctx, m)
	}
	dom, err := s.findDomain(ctx, m)
	if err != nil || dom == nil {
		return providersdk.Observation{}, err
	}
	return s.observeDomain(ctx, m, dom)
}

// observeDomain reports the state and addresses of dom, which carries m's mark.
func (s *session) observeDomain(ctx context.Context, m *providersdk.Machine, dom *host.Domain) (providersdk.Observation, error) {
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.Observation{}, err
	}
	o := providersdk.Observation{
		Exists:        true,
		ProviderID:    "libvirt://" + h.idHost + "/" + dom.UUID,
		PowerState:    powerState(dom),
		FailureDomain: h.failureDomain,
		Details:       &infrav1.LibvirtStatus{DomainUUID: dom.UUID, DomainName: dom.Name, Volumes: dom.Metadata.Volumes},
		State:         dom,
	}
	if o.PowerState == banlieuev1.PowerStatePoweredOn {
		ips, err := s.host.Addresses(ctx, dom)
		if err != nil {
			return providersdk.Observation{}, err
		}
		o.Addresses = machineAddresses(ips)
		// A guest's NICs come up one by one, and a static address is seen only through
		// the agent, after the DHCP leases: the machine looks again until there is an
		// address per NIC (or the SDK's bounded backoff ends), not only until the first.
		o.WaitingForGuest = len(o.Addresses) < max(len(dom.MACs), 1)
	}
	if o.PowerState == banlieuev1.PowerStatePoweredOn && m.Task.Ref == shutdownTask(dom) &&
		!m.Task.TimedOut(s.driver.now(), s.driver.shutdownTimeout) {
		o.Task = m.Task
	}
	// libvirt changes a domain's hardware while it is shut off (reshape); a running
	// domain's disks grow online.
	hw := hardwareOf(m, dom)
	o.Hardware = &hw
	changes := providersdk.HardwareDiff(m.Spec, hw)
	pending := providersdk.PendingChanges(changes, o.PowerState, m.DesiredPower(), func(c providersdk.HardwareChange) bool { return onlineChange(dom, c) })
	o.PendingRestart = providersdk.Descriptions(pending)
	o.UpToDate = o.PowerState == m.DesiredPower() && len(changes) == len(pending)
	if o.PowerState == banlieuev1.PowerStatePoweredOn {
		// A running domain without a boot ID gets one from Update (MarkBoot); Observe
		// never writes.
		o.BootID = dom.BootID
		o.UpToDate = o.UpToDate && dom.BootID != ""
	}
	return o, nil
}

// powerState maps a domain's state: a domain saved to disk (managed save) or paused
// is Suspended.
func powerState(dom *host.Domain) banlieuev1.PowerState {
	switch dom.State {
	case host.StateRunning, host.StateBlocked, host.StateShutdown:
		return banlieuev1.PowerStatePoweredOn
	case host.StatePaused, host.StatePMSuspended:
		return banlieuev1.PowerStateSuspended
	}
	if dom.ManagedSave {
		return banlieuev1.PowerStateSuspended
	}
	return banlieuev1.PowerStatePoweredOff
}

// machineAddresses are the machine's addresses among those its domain reports, in
// order and once each, without loopback, link-local or unspecified ones.
func machineAddresses(ips []string) []banlieuev1.MachineAddress {
	var out []banlieuev1.MachineAddress
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.IsLinkLocalUnicast() || ip.IsLoopback() || ip.IsUnspecified() {
			continue
		}
		a := banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: ip.String()}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Delete destroys and undefines the machine's domain, which Observe found (with its
// managed save image and NVRAM), then deletes the volumes made for the machine, by
// name. The SDK calls it for a deleted machine whose domain Observe did not find too:
// then it sweeps the volumes whose name starts with the machine's UID, made by a create
// that crashed before it defined the domain. It succeeds when everything is gone.
func (s *session) Delete(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
	dom := domainOf(obs)
	if dom == nil {
		// No domain: a Create interrupted before it defined one may have made volumes.
		// Their names start with the machine's UID, wherever its spec put them then.
		return providersdk.DeleteResult{}, s.host.SweepVolumes(ctx, string(m.UID)+"-", nil)
	}
	if err := s.host.Remove(ctx, dom); err != nil {
		return providersdk.DeleteResult{}, err
	}
	// The volumes the domain lists, and those the spec names (a reshape interrupted
	// before it redefined the domain made them): looked up by name, not swept.
	var volumes []host.VolumeRef
	for _, v := range dom.Metadata.Volumes {
		if ref, ok := host.ParseVolumeRef(v); ok {
			volumes = append(volumes, ref)
		}
	}
	opts := &infrav1.LibvirtOptions{}
	if err := m.Options("libvirt", opts); err == nil {
		disks, seed := s.machineVolumes(m, opts)
		volumes = append(volumes, disks...)
		if seed != nil {
			volumes = append(volumes, *seed)
		}
	}
	return providersdk.DeleteResult{}, s.host.DeleteVolumes(ctx, volumes)
}
