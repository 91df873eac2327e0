package host

import (
	"context"
	"fmt"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// Claim writes m, with the domain's own pool volumes as its Volumes, as banlieue's
// element in d's metadata unless the domain carries one with a machine UID already; it
// returns the element the domain carries afterwards, read back from libvirt, so the
// caller tells its claim from another's by the UID. libvirt has no compare-and-set:
// the read, the write and the read back happen in one call, and callers of one process
// serialize claims of a domain themselves.
//
// The element goes to the running domain and to its persistent definition alike
// (AFFECT_LIVE|AFFECT_CONFIG), only to the definition of a shut-off domain, only to the
// running one of a transient domain. Nothing else changes: not the devices, not the
// power state, not other tools' metadata. It fails with a NotFoundError of KindDomain
// when the domain is gone.
func (c *Client) Claim(ctx context.Context, d *Domain, m Metadata) (*Metadata, error) {
	return call(ctx, c, "SetDomainMetadata", "write banlieue's metadata on domain "+d.Name, func(l *libvirt.Libvirt) (*Metadata, error) {
		flags, err := metadataFlags(l, d)
		if err != nil {
			return nil, err
		}
		if out, err := readMark(l, d, flags); err != nil || (out != nil && out.UID != "") {
			return out, err
		}
		// The volumes the domain's definition holds, to be deleted with it as those of a
		// domain banlieue made are.
		x, err := l.DomainGetXMLDesc(d.ref, inactiveIf(flags&libvirt.DomainAffectConfig != 0))
		if err != nil {
			return nil, notFound(err, d)
		}
		if m.Volumes, err = ownVolumes(x); err != nil {
			return nil, err
		}
		err = l.DomainSetMetadata(d.ref, int32(libvirt.DomainMetadataElement), libvirt.OptString{m.element()},
			libvirt.OptString{"banlieue"}, libvirt.OptString{MetadataNamespace}, flags)
		if err != nil {
			return nil, notFound(err, d)
		}
		return readMark(l, d, flags)
	})
}

// metadataFlags are the parts of d, live and persistent, that hold its metadata.
func metadataFlags(l *libvirt.Libvirt, d *Domain) (libvirt.DomainModificationImpact, error) {
	active, err := l.DomainIsActive(d.ref)
	if err != nil {
		return 0, notFound(err, d)
	}
	persistent, err := l.DomainIsPersistent(d.ref)
	if err != nil {
		return 0, notFound(err, d)
	}
	var flags libvirt.DomainModificationImpact
	if active == 1 {
		flags |= libvirt.DomainAffectLive
	}
	if persistent == 1 {
		flags |= libvirt.DomainAffectConfig
	}
	return flags, nil
}

// readMark reads banlieue's element in each part of d that flags name; the first one
// with a machine UID, else any element found, else nil. A domain whose live and
// persistent elements differ is reported by the one that names a machine.
func readMark(l *libvirt.Libvirt, d *Domain, flags libvirt.DomainModificationImpact) (*Metadata, error) {
	var found *Metadata
	for _, part := range []libvirt.DomainModificationImpact{libvirt.DomainAffectLive, libvirt.DomainAffectConfig} {
		if flags&part == 0 {
			continue
		}
		x, err := l.DomainGetMetadata(d.ref, int32(libvirt.DomainMetadataElement), libvirt.OptString{MetadataNamespace}, part)
		if isCode(err, libvirt.ErrNoDomainMetadata) {
			continue
		}
		if err != nil {
			return nil, notFound(err, d)
		}
		md, ok := elementMetadata(x)
		if !ok {
			return nil, fmt.Errorf("banlieue's metadata element of domain %s does not parse: %q", d.Name, x)
		}
		if md.UID != "" {
			return md, nil
		}
		found = md
	}
	return found, nil
}

// inactiveIf is the XML flag that reads a domain's persistent definition when inactive.
func inactiveIf(inactive bool) libvirt.DomainXMLFlags {
	if inactive {
		return libvirt.DomainXMLInactive
	}
	return 0
}

// notFound types libvirt's "no domain" as a NotFoundError of KindDomain for d.
func notFound(err error, d *Domain) error {
	if isCode(err, libvirt.ErrNoDomain) {
		return &NotFoundError{Kind: KindDomain, Name: d.UUID}
	}
	return err
}

// ownVolumes are "<pool>/<volume>" of the disks of a domain's XML whose source is a
// pool volume, in bus order: no CD-ROM (an installer ISO is usually shared), no disk
// marked read-only or shareable (another domain may use it), no file or block device
// (no pool lists it).
func ownVolumes(x string) ([]string, error) {
	def := &libvirtxml.Domain{}
	if err := def.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("failed to parse the domain XML: %w", err)
	}
	var out []string
	if def.Devices == nil {
		return nil, nil
	}
	for _, disk := range def.Devices.Disks {
		if (disk.Device != "disk" && disk.Device != "") || disk.ReadOnly != nil || disk.Shareable != nil {
			continue
		}
		if disk.Source != nil && disk.Source.Volume != nil && disk.Source.Volume.Pool != "" && disk.Source.Volume.Volume != "" {
			out = append(out, VolumeRef{Pool: disk.Source.Volume.Pool, Name: disk.Source.Volume.Volume}.String())
		}
	}
	return out, nil
}

// element writes the element as SetMetadata takes it: without a namespace, which
// libvirt gives it (with the prefix the call names), as it does the element's children.
func (m Metadata) element() string { return m.write("") }
