package host

import (
	"context"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"
)

// State is a domain's state, as libvirt reports it.
type State int

// The states of a domain.
const (
	// StateNoState is a domain libvirt knows no state of.
	StateNoState State = iota
	// StateRunning is a running domain.
	StateRunning
	// StateBlocked is a running domain blocked on a resource.
	StateBlocked
	// StatePaused is a domain whose CPUs are stopped, by a user or by the hypervisor.
	StatePaused
	// StateShutdown is a domain shutting down.
	StateShutdown
	// StateShutoff is a domain that does not run.
	StateShutoff
	// StateCrashed is a domain whose guest crashed.
	StateCrashed
	// StatePMSuspended is a domain whose guest suspended itself (ACPI S3).
	StatePMSuspended
)

// Domain is a domain as one lookup read it: its definition, state and disk sizes.
type Domain struct {
	// Name and UUID are the domain's.
	Name, UUID string
	// Arch is the guest architecture, e.g. x86_64.
	Arch string
	// CPUs is the virtual CPU count: those running (<vcpu current>).
	CPUs uint
	// MaxCPUs is the <vcpu> maximum, to which CPUs can grow while the domain runs.
	MaxCPUs uint
	// MemoryMiB is the memory in MiB, DIMMs included.
	MemoryMiB uint
	// MaxMemoryMiB is the <maxMemory> DIMMs can grow the memory to while the domain
	// runs; 0 when it has none.
	MaxMemoryMiB uint
	// MemorySlots is the number of memory devices <maxMemory> has room for.
	MemorySlots uint
	// MemoryDevices counts the domain's memory devices (DIMMs), each in a slot.
	MemoryDevices int
	// NUMACells counts the domain's NUMA cells; a DIMM plugs into one.
	NUMACells int
	// Metadata is banlieue's element in the domain's <metadata>; nil when it has none.
	Metadata *Metadata
	// Disks are the volumes of the domain's disk devices (not CD-ROMs), in bus order.
	Disks []VolumeRef
	// DiskBytes are the sizes of Disks in bytes; 0 where a size cannot be read.
	DiskBytes []int64
	// DiskDevices counts the domain's disk devices (not CD-ROMs), whatever their
	// source: more than len(Disks) when some are files or block devices, as on a domain
	// banlieue did not make.
	DiskDevices int
	// MACs are the lowercase MAC addresses of the domain's NICs.
	MACs []string
	// Networks are the libvirt networks of the NICs.
	Networks []string
	// NVRAM is true when the domain has UEFI variables to delete with it.
	NVRAM bool
	// EFI is true when the domain boots with UEFI: firmware="efi", a pflash loader (as
	// OVMF is loaded) or UEFI variables; false for BIOS.
	EFI bool
	// State is the domain's state.
	State State
	// Reason is libvirt's code for why the domain is in State.
	Reason int32
	// PausedByUser is true when the domain was paused on purpose (libvirt's pause
	// reason "user"), not stopped by the hypervisor (a crash, an I/O error).
	PausedByUser bool
	// PausedInTransit is true when libvirt paused the domain for an operation it is
	// still doing (starting it, a migration, a save, a dump, a snapshot, a shutdown):
	// the domain resumes or stops by itself, and nothing should act on it meanwhile.
	PausedInTransit bool
	// ManagedSave is true when the domain's memory is saved to disk (a managed save).
	ManagedSave bool
	// BootID is the ID MarkBoot gave the domain's current boot; "" when it has none,
	// and always while the domain is not running.
	BootID string

	ref libvirt.Domain
}

// FindDomain looks up the domain with UUID id and reads its XML, state and disk sizes.
// It fails with a NotFoundError of KindDomain when there is none.
func (c *Client) FindDomain(ctx context.Context, id string) (*Domain, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("failed to look up domain %s: the UUID does not parse: %w", id, err)
	}
	return call(ctx, c, "LookupDomain", "look up domain "+id, func(l *libvirt.Libvirt) (*Domain, error) {
		dom, err := l.DomainLookupByUUID(libvirt.UUID(u))
		if isCode(err, libvirt.ErrNoDomain) {
			return nil, &NotFoundError{Kind: KindDomain, Name: id}
		}
		if err != nil {
			return nil, err
		}
		return readDomain(l, dom)
	})
}

// readDomain reads a domain's XML, state, managed save image and disk sizes.
func readDomain(l *libvirt.Libvirt, dom libvirt.Domain) (*Domain, error) {
	d, err := readDefinition(l, dom)
	if err != nil {
		return nil, err
	}
	return d, readState(l, d)
}

// readDefinition reads a domain's XML (the live definition of a running domain), without
// its state and disk sizes.
func readDefinition(l *libvirt.Libvirt, dom libvirt.Domain) (*Domain, error) {
	x, err := l.DomainGetXMLDesc(dom, 0)
	if err != nil {
		return nil, err
	}
	d, err := parseDomain(x)
	if err != nil {
		return nil, err
	}
	d.ref = dom
	return d, nil
}

// readState reads the state, managed save image and disk sizes of a domain whose
// definition readDefinition read.
func readState(l *libvirt.Libvirt, d *Domain) error {
	dom := d.ref
	st, reason, err := l.DomainGetState(dom, 0)
	if err != nil {
		return err
	}
	d.State, d.Reason = State(st), reason
	paused := libvirt.DomainState(st) == libvirt.DomainPaused
	d.PausedByUser = paused && reason == int32(libvirt.DomainPausedUser)
	d.PausedInTransit = paused && pausedInTransit(libvirt.DomainPausedReason(reason))
	if has, err := l.DomainHasManagedSaveImage(dom, 0); err == nil {
		d.ManagedSave = has == 1
	} else if !isCode(err, libvirt.ErrNoSupport) {
		return err
	}
	for _, v := range d.Disks {
		d.DiskBytes = append(d.DiskBytes, volumeCapacity(l, v))
	}
	return nil
}

// pausedInTransit reports whether a pause reason is an operation libvirt is doing and
// ends by itself. Starting up is the one a provider sees most: QEMU is launched paused
// and resumed once set up, which takes seconds on a loaded host under TCG.
func pausedInTransit(r libvirt.DomainPausedReason) bool {
	switch r {
	case libvirt.DomainPausedStartingUp, libvirt.DomainPausedMigration, libvirt.DomainPausedSave,
		libvirt.DomainPausedDump, libvirt.DomainPausedSnapshot, libvirt.DomainPausedShuttingDown,
		libvirt.DomainPausedPostcopy:
		return true
	}
	return false
}

// volumeCapacity is a volume's size in bytes; 0 when it cannot be read.
func volumeCapacity(l *libvirt.Libvirt, v VolumeRef) int64 {
	vol, err := findVolume(l, v)
	if err != nil {
		return 0
	}
	_, capacity, _, err := l.StorageVolGetInfo(vol)
	if err != nil {
		return 0
	}
	return int64(capacity)
}

// DefineDomain defines the domain of spec unless one with its UUID exists, which it
// returns as it is (what an interrupted define made, or a domain that is not the
// caller's: its Metadata tells). It fails with a NameInUseError when another domain has
// spec's name.
func (c *Client) DefineDomain(ctx context.Context, spec DomainSpec) (*Domain, error) {
	u, err := uuid.Parse(spec.UUID)
	if err != nil {
		return nil, fmt.Errorf("failed to define domain %s: the UUID does not parse: %w", spec.Name, err)
	}
	x, err := renderDomain(spec)
	if err != nil {
		return nil, fmt.Errorf("failed to render the domain XML: %w", err)
	}
	return call(ctx, c, "DefineDomain", "define domain "+spec.Name, func(l *libvirt.Libvirt) (*Domain, error) {
		dom, err := l.DomainLookupByUUID(libvirt.UUID(u))
		if err != nil && !isCode(err, libvirt.ErrNoDomain) {
			return nil, err
		}
		if err != nil {
			if dom, err = l.DomainDefineXMLFlags(x, 0); err != nil {
				if other, lerr := l.DomainLookupByName(spec.Name); lerr == nil && uuidString(other.UUID) != spec.UUID {
					return nil, &NameInUseError{Name: spec.Name, UUID: uuidString(other.UUID)}
				}
				return nil, err
			}
		}
		return readDomain(l, dom)
	})
}

// uuidString formats a libvirt UUID.
func uuidString(u libvirt.UUID) string { return uuid.UUID(u).String() }

// Reshape is a change to a shut-off domain's definition.
type Reshape struct {
	// CPUs is the new virtual CPU count.
	CPUs uint
	// MaxCPUs is the new <vcpu> maximum; CPUs when it is not larger.
	MaxCPUs uint
	// MemoryMiB is the new memory in MiB.
	MemoryMiB uint
	// MaxMemoryMiB is the new <maxMemory>, as DomainSpec's; 0 keeps the domain's
	// <maxMemory>, if any, dropped when MemoryMiB reaches it (setMaxMemory).
	MaxMemoryMiB uint
	// MemorySlots is the room of a new <maxMemory>, in DIMMs; one the domain has
	// keeps its own.
	MemorySlots uint
	// AddDisks are disks to attach; their volumes must exist.
	AddDisks []IndexedDisk
	// Metadata replaces banlieue's element in the domain's <metadata>.
	Metadata Metadata
}

// IndexedDisk is a disk and its position on the domain's bus (0 is vda).
type IndexedDisk struct {
	// Index is the disk's position: vda for 0, vdb for 1, …
	Index int
	// Disk is the disk.
	Disk Disk
}

// Reconfigure redefines d (shut off) with r's CPUs, memory, maxima, added disks and
// metadata, keeping the rest of its definition and other tools' metadata. The DIMMs
// plugged while it ran fold into its one NUMA cell, which holds r.MemoryMiB: they
// free their slots for the next boot's growth.
func (c *Client) Reconfigure(ctx context.Context, d *Domain, r Reshape) error {
	return c.redefine(ctx, "ReconfigureDomain", "reconfigure domain "+d.Name, d, func(def *libvirtxml.Domain) {
		if def.Devices == nil {
			def.Devices = &libvirtxml.DomainDeviceList{}
		}
		for _, a := range r.AddDisks {
			def.Devices.Disks = append(def.Devices.Disks, a.Disk.device(a.Index))
		}
		def.VCPU = vcpu(def.VCPU, r.CPUs, r.MaxCPUs)
		reshapeMemory(def, r)
		def.Metadata = &libvirtxml.DomainMetadata{XML: replaceMetadata(def.Metadata, r.Metadata)}
	})
}

// reshapeMemory gives def r's memory and <maxMemory>. With one NUMA cell (banlieue's
// for DIMMs, or any with r.MaxMemoryMiB) the cell holds the memory, whose DIMMs it
// replaces; libvirt counts a domain's memory from its cells and DIMMs, not <memory>.
func reshapeMemory(def *libvirtxml.Domain, r Reshape) {
	def.Memory = &libvirtxml.DomainMemory{Value: r.MemoryMiB, Unit: "MiB"}
	def.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: r.MemoryMiB, Unit: "MiB"}
	switch {
	case r.MaxMemoryMiB > 0:
		setMaxMemory(def, r.MaxMemoryMiB, r.MemorySlots)
	case def.MaximumMemory != nil:
		setMaxMemory(def, toMiB(def.MaximumMemory.Value, def.MaximumMemory.Unit), 0)
	}
	hasCells := def.CPU != nil && def.CPU.Numa != nil && len(def.CPU.Numa.Cell) > 0
	if (r.MaxMemoryMiB > 0 || hasCells) && setNUMACell(def, r.MemoryMiB) {
		def.Devices.Memorydevs = slices.DeleteFunc(def.Devices.Memorydevs, func(m libvirtxml.DomainMemorydev) bool { return m.Model == "dimm" })
	}
}

// SetType redefines d (shut off) to run on the hypervisor domainType (kvm or qemu),
// keeping the rest of its definition: name, UUID, devices and metadata.
func (c *Client) SetType(ctx context.Context, d *Domain, domainType string) error {
	return c.redefine(ctx, "RetypeDomain", "redefine domain "+d.Name+" as "+domainType, d, func(def *libvirtxml.Domain) {
		def.Type = domainType
	})
}

// redefine defines d again with its inactive definition as edit changes it.
func (c *Client) redefine(ctx context.Context, operation, what string, d *Domain, edit func(*libvirtxml.Domain)) error {
	return c.do(ctx, operation, what, func(l *libvirt.Libvirt) error {
		x, err := l.DomainGetXMLDesc(d.ref, libvirt.DomainXMLInactive)
		if err != nil {
			return err
		}
		def := &libvirtxml.Domain{}
		if err := def.Unmarshal(x); err != nil {
			return err
		}
		edit(def)
		nx, err := def.Marshal()
		if err != nil {
			return err
		}
		_, err = l.DomainDefineXMLFlags(nx, 0)
		return err
	})
}

// RemoveMetadata removes banlieue's element from d's <metadata>, in the running domain
// and its persistent definition alike (libvirt's SetMetadata, live and config), and
// changes nothing else: other tools' metadata, the devices, the volumes and the power
// state stay. It succeeds when the element is already gone.
func (c *Client) RemoveMetadata(ctx context.Context, d *Domain) error {
	return c.do(ctx, "SetDomainMetadata", "remove banlieue's metadata from domain "+d.Name, func(l *libvirt.Libvirt) error {
		active, err := l.DomainIsActive(d.ref)
		if isCode(err, libvirt.ErrNoDomain) {
			return &NotFoundError{Kind: KindDomain, Name: d.UUID}
		}
		if err != nil {
			return err
		}
		flags := libvirt.DomainAffectConfig
		if active == 1 {
			flags |= libvirt.DomainAffectLive
		}
		err = l.DomainSetMetadata(d.ref, int32(libvirt.DomainMetadataElement), nil, nil, libvirt.OptString{MetadataNamespace}, flags)
		if isCode(err, libvirt.ErrNoDomain) {
			return &NotFoundError{Kind: KindDomain, Name: d.UUID}
		}
		return err
	})
}

// Addresses are the IP addresses d reports, unfiltered: the DHCP leases of its MACs on
// its libvirt networks, then what the guest agent reports. Errors of either source are
// ignored: a guest without an agent, or a network without DHCP, has none.
func (c *Client) Addresses(ctx context.Context, d *Domain) ([]string, error) {
	return call(ctx, c, "GetAddresses", "read the addresses of domain "+d.Name, func(l *libvirt.Libvirt) ([]string, error) {
		var out []string
		for _, name := range d.Networks {
			n, err := l.NetworkLookupByName(name)
			if err != nil {
				continue
			}
			leases, _, err := l.NetworkGetDhcpLeases(n, nil, 1, 0)
			if err != nil {
				continue
			}
			for _, lease := range leases {
				if len(lease.Mac) > 0 && containsFold(d.MACs, lease.Mac[0]) {
					out = append(out, lease.Ipaddr)
				}
			}
		}
		ifaces, err := l.DomainInterfaceAddresses(d.ref, uint32(libvirt.DomainInterfaceAddressesSrcAgent), 0)
		if err == nil {
			for _, i := range ifaces {
				for _, a := range i.Addrs {
					out = append(out, a.Addr)
				}
			}
		}
		return out, nil
	})
}

// containsFold reports whether list holds s, ignoring case.
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// MarkedDomains lists every domain of the host, running or not, and reads banlieue's
// element of each one's metadata (libvirt's GetMetadata for MetadataNamespace), over one
// connection: one call to list, then one small call per domain, not the domains' whole
// XML. It returns the domains that have the element, with Name, UUID and Metadata set.
// A domain undefined meanwhile is left out.
func (c *Client) MarkedDomains(ctx context.Context) ([]Domain, error) {
	return call(ctx, c, "ListAllDomains", "list the domains' metadata", func(l *libvirt.Libvirt) ([]Domain, error) {
		var out []Domain
		doms, _, err := l.ConnectListAllDomains(1, 0)
		if err != nil {
			return nil, err
		}
		for _, dom := range doms {
			x, err := l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{MetadataNamespace}, libvirt.DomainAffectCurrent)
			switch {
			case isCode(err, libvirt.ErrNoDomainMetadata), isCode(err, libvirt.ErrNoDomain):
				continue
			case err != nil:
				return nil, err
			}
			md, ok := elementMetadata(x)
			if !ok {
				continue
			}
			out = append(out, Domain{Name: dom.Name, UUID: uuid.UUID(dom.UUID).String(), Metadata: md, ref: dom})
		}
		return out, nil
	})
}

// Domains lists every domain of the host, running or not, over one connection: one
// call to list them, one to read each one's XML, and, for each domain keep accepts by
// its definition (Metadata included), the reads FindDomain makes of its state, managed
// save image and disk sizes. A domain undefined meanwhile is left out.
func (c *Client) Domains(ctx context.Context, keep func(*Domain) bool) ([]*Domain, error) {
	return call(ctx, c, "ListAllDomains", "list the domains", func(l *libvirt.Libvirt) ([]*Domain, error) {
		var out []*Domain
		doms, _, err := l.ConnectListAllDomains(1, 0)
		if err != nil {
			return nil, err
		}
		for _, dom := range doms {
			d, err := readDefinition(l, dom)
			if err == nil {
				if !keep(d) {
					continue
				}
				err = readState(l, d)
			}
			switch {
			case isCode(err, libvirt.ErrNoDomain):
			case err != nil:
				return nil, err
			default:
				out = append(out, d)
			}
		}
		return out, nil
	})
}

// elementMetadata reads banlieue's element as GetMetadata returns it: without its
// namespace, which the request named (<machine><uid>…</uid>…</machine>).
func elementMetadata(x string) (*Metadata, bool) {
	var el struct {
		UID       string   `xml:"uid"`
		Namespace string   `xml:"namespace"`
		Name      string   `xml:"name"`
		Cluster   string   `xml:"cluster"`
		Volumes   []string `xml:"volume"`
		Hotplug   []string `xml:"hotplug"`
	}
	if err := xml.Unmarshal([]byte(x), &el); err != nil {
		return nil, false
	}
	return &Metadata{UID: el.UID, Namespace: el.Namespace, Name: el.Name, Cluster: el.Cluster, Volumes: el.Volumes, Hotplug: el.Hotplug}, true
}
