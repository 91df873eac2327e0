package libvirt

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// shutdownTaskPrefix starts the task reference recorded for a guest shutdown, which
// libvirt does not track: "shutdown:<domain UUID>". Observe reports it in flight while
// the domain runs and the shutdown timeout has not passed; Update then destroys it.
const shutdownTaskPrefix = "shutdown:"

// domainState is a machine's domain as one lookup found it.
type domainState struct {
	dom   libvirt.Domain
	obs   *observedDomain
	state libvirt.DomainState
	// reason is why the domain is in state, e.g. who paused it.
	reason      int32
	managedSave bool
	// capacities are the byte sizes of obs.disks, in order; 0 when unknown.
	capacities []uint64
}

// machineUUID is the domain UUID of a machine: its UID, which Kubernetes makes a UUID.
func machineUUID(m *providersdk.Machine) (libvirt.UUID, error) {
	u, err := uuid.Parse(string(m.UID))
	if err != nil {
		return libvirt.UUID{}, providersdk.Permanent(infrav1.MachineFailedReason, "the machine's UID %q is not a UUID", m.UID)
	}
	return libvirt.UUID(u), nil
}

// findDomain looks the machine's domain up by UUID and reads its XML, state and disk
// sizes; nil when there is none. A domain with the UUID whose banlieue metadata does not
// name the machine is refused.
func (s *session) findDomain(ctx context.Context, m *providersdk.Machine) (*domainState, error) {
	id, err := machineUUID(m)
	if err != nil {
		return nil, err
	}
	var ds *domainState
	err = s.do(ctx, "LookupDomain", "look up the domain of machine "+string(m.UID), func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByUUID(id)
		if isCode(err, libvirt.ErrNoDomain) {
			return nil
		}
		if err != nil {
			return err
		}
		x, err := l.DomainGetXMLDesc(dom, 0)
		if err != nil {
			return err
		}
		obs, err := parseDomain(x)
		if err != nil {
			return err
		}
		st, reason, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		ds = &domainState{dom: dom, obs: obs, state: libvirt.DomainState(st), reason: reason}
		if has, err := l.DomainHasManagedSaveImage(dom, 0); err == nil {
			ds.managedSave = has == 1
		} else if !isCode(err, libvirt.ErrNoSupport) {
			return err
		}
		for _, v := range obs.disks {
			ds.capacities = append(ds.capacities, volumeCapacity(l, v))
		}
		return nil
	})
	if err != nil || ds == nil {
		return nil, err
	}
	if ds.obs.meta == nil || ds.obs.meta.UID != string(m.UID) {
		got := "<none>"
		if ds.obs.meta != nil {
			got = ds.obs.meta.UID
		}
		return nil, providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
			"domain %q has this machine's UUID but its banlieue metadata names UID %s, not the machine's; it is left alone", ds.obs.name, got)
	}
	return ds, nil
}

// volumeCapacity is a volume's size in bytes; 0 when it cannot be read.
func volumeCapacity(l *libvirt.Libvirt, v volumeRef) uint64 {
	vol, err := findVolume(l, v)
	if err != nil {
		return 0
	}
	_, capacity, _, err := l.StorageVolGetInfo(vol)
	if err != nil {
		return 0
	}
	return capacity
}

// Observe finds the machine's domain by its UUID and reports its state and addresses.
// It never changes the host.
func (s *session) Observe(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	ds, err := s.findDomain(ctx, m)
	if err != nil || ds == nil {
		return providersdk.Observation{}, err
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.Observation{}, err
	}
	o := providersdk.Observation{
		Exists:        true,
		ProviderID:    "libvirt://" + h.idHost + "/" + ds.obs.uuid,
		PowerState:    powerState(ds),
		FailureDomain: h.failureDomain,
		Details:       &infrav1.LibvirtStatus{DomainUUID: ds.obs.uuid, DomainName: ds.obs.name, Volumes: ds.obs.meta.Volumes},
	}
	if o.PowerState == banlieuev1.PowerStatePoweredOn {
		err := s.do(ctx, "GetAddresses", "read the addresses of domain "+ds.obs.name, func(l *libvirt.Libvirt) error {
			o.Addresses = addresses(l, ds)
			return nil
		})
		if err != nil {
			return providersdk.Observation{}, err
		}
		o.WaitingForGuest = len(o.Addresses) == 0
	}
	if strings.HasPrefix(m.Task.Ref, shutdownTaskPrefix) && o.PowerState == banlieuev1.PowerStatePoweredOn && !s.shutdownTimedOut(m.Task) {
		o.Task = m.Task
	}
	o.UpToDate = o.PowerState == desiredPower(m) && len(hardwareChanges(m, ds)) == 0
	return o, nil
}

// powerState maps a domain's state: a domain saved to disk (managed save) or paused
// is Suspended.
func powerState(ds *domainState) banlieuev1.PowerState {
	switch ds.state {
	case libvirt.DomainRunning, libvirt.DomainBlocked, libvirt.DomainShutdown:
		return banlieuev1.PowerStatePoweredOn
	case libvirt.DomainPaused, libvirt.DomainPmsuspended:
		return banlieuev1.PowerStateSuspended
	}
	if ds.managedSave {
		return banlieuev1.PowerStateSuspended
	}
	return banlieuev1.PowerStatePoweredOff
}

// desiredPower is the machine's power state, PoweredOn when unset.
func desiredPower(m *providersdk.Machine) banlieuev1.PowerState {
	if m.Spec.PowerState == "" {
		return banlieuev1.PowerStatePoweredOn
	}
	return m.Spec.PowerState
}

// addresses are the domain's addresses: DHCP leases of its MACs on its libvirt
// networks, then what the guest agent reports; without loopback or link-local ones.
// Errors are ignored: a guest without an agent, or a network without DHCP, has none.
func addresses(l *libvirt.Libvirt, ds *domainState) []banlieuev1.MachineAddress {
	var out []banlieuev1.MachineAddress
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.IsLinkLocalUnicast() || ip.IsLoopback() || ip.IsUnspecified() {
			return
		}
		a := banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: ip.String()}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, name := range ds.obs.networks {
		n, err := l.NetworkLookupByName(name)
		if err != nil {
			continue
		}
		leases, _, err := l.NetworkGetDhcpLeases(n, nil, 1, 0)
		if err != nil {
			continue
		}
		for _, lease := range leases {
			if len(lease.Mac) > 0 && slices.Contains(ds.obs.macs, strings.ToLower(lease.Mac[0])) {
				add(lease.Ipaddr)
			}
		}
	}
	ifaces, err := l.DomainInterfaceAddresses(ds.dom, uint32(libvirt.DomainInterfaceAddressesSrcAgent), 0)
	if err == nil {
		for _, i := range ifaces {
			for _, a := range i.Addrs {
				add(a.Addr)
			}
		}
	}
	return out
}

// shutdownTimedOut reports whether a guest shutdown recorded as task t has had its time.
func (s *session) shutdownTimedOut(t providersdk.Task) bool {
	return !t.StartedAt.IsZero() && s.driver.now().Sub(t.StartedAt) >= s.driver.shutdownTimeout
}

// Delete destroys and undefines the machine's domain (with its managed save image and
// NVRAM), then deletes the volumes made for the machine: those its metadata lists and
// any whose name starts with the machine's UID (made by a create that crashed before it
// defined the domain). It succeeds when everything is already gone.
func (s *session) Delete(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
	ds, err := s.findDomain(ctx, m)
	if err != nil {
		return providersdk.DeleteResult{}, err
	}
	var listed []string
	if ds != nil {
		listed = ds.obs.meta.Volumes
		err := s.do(ctx, "DeleteDomain", "delete domain "+ds.obs.name, func(l *libvirt.Libvirt) error {
			if ds.state != libvirt.DomainShutoff && ds.state != libvirt.DomainCrashed {
				if err := l.DomainDestroyFlags(ds.dom, 0); err != nil && !isCode(err, libvirt.ErrOperationInvalid, libvirt.ErrNoDomain) {
					return err
				}
			}
			var flags libvirt.DomainUndefineFlagsValues
			if ds.managedSave {
				flags |= libvirt.DomainUndefineManagedSave
			}
			if ds.obs.nvram {
				flags |= libvirt.DomainUndefineNvram
			}
			if err := l.DomainUndefineFlags(ds.dom, flags); err != nil && !isCode(err, libvirt.ErrNoDomain) {
				return err
			}
			return nil
		})
		if err != nil {
			return providersdk.DeleteResult{}, err
		}
	}
	return providersdk.DeleteResult{}, s.deleteVolumes(ctx, string(m.UID), listed)
}

// deleteVolumes deletes the volumes named in listed ("<pool>/<name>") and those in any
// active pool whose name starts with "<uid>-".
func (s *session) deleteVolumes(ctx context.Context, uid string, listed []string) error {
	return s.do(ctx, "DeleteVolumes", "delete the volumes of machine "+uid, func(l *libvirt.Libvirt) error {
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return err
		}
		for _, p := range pools {
			vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
			if err != nil {
				return err
			}
			for _, v := range vols {
				if !strings.HasPrefix(v.Name, uid+"-") && !slices.Contains(listed, p.Name+"/"+v.Name) {
					continue
				}
				if err := l.StorageVolDelete(v, 0); err != nil && !isCode(err, libvirt.ErrNoStorageVol) {
					return err
				}
			}
		}
		return nil
	})
}
