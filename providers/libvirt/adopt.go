package libvirt

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// providerIDScheme starts every providerID this driver writes:
// "libvirt://<host>/<domain UUID>".
const providerIDScheme = "libvirt://"

var _ providersdk.Adopter = (*session)(nil)

// providerID is the providerID of the domain with UUID id on the host h.
func providerID(h *hostInfo, id string) string { return providerIDScheme + h.idHost + "/" + id }

// ProviderIDPrefix is "libvirt://<host>/", which starts the providerID of every domain
// of the session's libvirtd. The SDK asks for it right after the inventory, which reads
// the host's name; a session that has not read it yet takes the endpoint's host, else
// reads the host's name now, and returns "" (no adoption placed here) when it cannot.
func (s *session) ProviderIDPrefix() string {
	s.mu.Lock()
	h := s.info
	s.mu.Unlock()
	if h == nil {
		if rh := s.host.RemoteHost(); rh != "" {
			return providerIDScheme + rh + "/"
		}
		// The interface takes no context: the read is bounded as a connection is.
		ctx, cancel := context.WithTimeout(context.Background(), s.driver.dialTimeout)
		defer cancel()
		var err error
		if h, err = s.hostInfo(ctx); err != nil {
			return ""
		}
	}
	return providerID(h, "")
}

// adoptedUUID is the domain UUID an adopting machine's adoptProviderID names on the
// session's host; an AdoptionTargetInvalid error when the ID is of another form or
// names another host. The UUID must be written as libvirt writes it (lowercase, with
// hyphens), for the machine's providerID ends up equal to the ID.
func (s *session) adoptedUUID(ctx context.Context, id string) (string, error) {
	h, err := s.hostInfo(ctx)
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(id, providerIDScheme)
	if !ok {
		return "", providersdk.AdoptionTargetInvalid(id, "it is not a libvirt provider ID, libvirt://<host>/<domain UUID>")
	}
	idHost, domUUID, ok := strings.Cut(rest, "/")
	switch {
	case !ok:
		return "", providersdk.AdoptionTargetInvalid(id, "it names no domain UUID after the host, as libvirt://<host>/<domain UUID> does")
	case idHost != h.idHost:
		return "", providersdk.AdoptionTargetInvalid(id, fmt.Sprintf("it names host %q, and the Provider's libvirtd is %q", idHost, h.idHost))
	}
	u, err := uuid.Parse(domUUID)
	if err != nil || u.String() != domUUID {
		return "", providersdk.AdoptionTargetInvalid(id, fmt.Sprintf("%q is not a domain UUID as libvirt writes it (lowercase, with hyphens)", domUUID))
	}
	return domUUID, nil
}

// observeAdopting observes the domain an adopting machine's adoptProviderID names, by
// the mark it carries: the machine's is observed as any machine's domain; none is
// Unclaimed (not there once the machine is deleted); another machine's is
// AlreadyManaged (not there once the machine is deleted). No domain is not there,
// which the SDK reports as AdoptionTargetNotFound.
func (s *session) observeAdopting(ctx context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	id := m.Spec.AdoptProviderID
	domUUID, err := s.adoptedUUID(ctx, id)
	if err != nil {
		return providersdk.Observation{}, err
	}
	dom, err := s.host.FindDomain(ctx, domUUID)
	if host.IsNotFound(err) {
		return providersdk.Observation{}, nil
	}
	if err != nil {
		return providersdk.Observation{}, err
	}
	switch {
	case dom.Metadata != nil && dom.Metadata.UID == string(m.UID):
		return s.observeDomain(ctx, m, dom)
	case m.Deleting:
		// Unclaimed, or claimed by another machine, the domain is not this machine's to
		// delete nor to release: a Release that removed the mark ends here too.
		return providersdk.Observation{}, nil
	case dom.Metadata != nil && dom.Metadata.UID != "":
		return providersdk.Observation{}, providersdk.AlreadyManaged(id)
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.Observation{}, err
	}
	return providersdk.Observation{
		Exists:     true,
		Unclaimed:  true,
		ProviderID: providerID(h, dom.UUID),
		PowerState: powerState(dom),
		State:      dom,
	}, nil
}

// Adopt writes the machine's mark on the unmarked domain Observe found, with the
// domain's own pool volumes (see host.Claim), which Delete removes with it as it does
// those of a domain it made; Release removes the mark and leaves them. Nothing else
// changes: the domain keeps running, with its ID, boot, devices and firmware. libvirt
// has no compare-and-set, so the session serializes claims of one domain: of two
// machines adopting it, the second reads the first's mark and gets AlreadyManaged.
// Two installations claiming one domain at once are not serialized: the last writer
// wins, and the loser's next Observe reports AlreadyManaged.
func (s *session) Adopt(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.AdoptResult, error) {
	dom := domainOf(obs)
	if dom == nil {
		return providersdk.AdoptResult{}, nil // nothing found: the next Observe says so
	}
	unlock := s.claims.lock(dom.UUID)
	defer unlock()
	got, err := s.host.Claim(ctx, dom, machineMetadata(m))
	if host.IsNotFound(err) {
		return providersdk.AdoptResult{}, nil // undefined meanwhile: the next Observe says so
	}
	if err != nil {
		return providersdk.AdoptResult{}, err
	}
	if got == nil || got.UID != string(m.UID) {
		return providersdk.AdoptResult{}, providersdk.AlreadyManaged(m.Spec.AdoptProviderID)
	}
	return providersdk.AdoptResult{}, nil
}

// adoptedHardware is the shape of the domain an adopting machine claimed, for
// providersdk.HardwareDiff: only CPUs, memory and disks are compared, and its disks
// only when every one is a pool volume. A domain banlieue did not make may have file
// or block device disks, whose size no pool reports and which a volume must not be
// attached in place of: then its disks are all of unknown size, so none grows and none
// is added in place of one it has.
func adoptedHardware(dom *host.Domain) providersdk.Hardware {
	hw := hardware(dom)
	if dom.DiskDevices > len(dom.Disks) {
		hw.DiskBytes = make([]int64, dom.DiskDevices)
	}
	return hw
}

// hardwareOf is the shape of m's domain as Observe and Update compare it with the
// machine's spec: adoptedHardware for an adopting machine.
func hardwareOf(m *providersdk.Machine, dom *host.Domain) providersdk.Hardware {
	if m.Spec.Adopts() {
		return adoptedHardware(dom)
	}
	return hardware(dom)
}

// domainLocks are per-domain mutexes, each kept while some caller holds or waits for it.
type domainLocks struct {
	mu    sync.Mutex
	locks map[string]*domainLock
}

// domainLock is one domain's mutex and the number of its holders and waiters.
type domainLock struct {
	sync.Mutex
	refs int
}

// lock locks the domain id's mutex and returns its unlock.
func (d *domainLocks) lock(id string) (unlock func()) {
	d.mu.Lock()
	if d.locks == nil {
		d.locks = map[string]*domainLock{}
	}
	l := d.locks[id]
	if l == nil {
		l = &domainLock{}
		d.locks[id] = l
	}
	l.refs++
	d.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		d.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.locks, id)
		}
		d.mu.Unlock()
	}
}
