package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

const gib = 1 << 30

// Create makes the machine's volumes (a qcow2 overlay on the image for the first disk,
// blank volumes for the others, the NoCloud seed when the machine has user data), then
// defines the domain and starts it unless the machine asks for PoweredOff. Every step
// finds what an earlier, interrupted Create made and keeps it, so a provider that
// crashed mid-create never makes a second domain or volume.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
	ds, err := s.findDomain(ctx, m)
	if err != nil || ds != nil {
		return providersdk.CreateResult{}, err // an existing domain is Update's to start
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	opts := &infrav1.LibvirtOptions{}
	if m.Object != nil {
		if err := m.SpecField("libvirt", opts); err != nil {
			return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineFailedReason, "%s", err.Error())
		}
	}
	spec := s.domainSpec(m, opts, h)
	err = s.do(ctx, "CreateVolumes", "create the volumes of domain "+spec.name, func(l *libvirt.Libvirt) error {
		for i, d := range machineDisks(m) {
			if err := s.ensureDisk(l, m, i, d, spec.disks[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	if err := s.hook("volumes"); err != nil {
		return providersdk.CreateResult{}, err
	}
	if spec.seed != nil {
		iso, err := buildSeedISO(seed{userData: m.UserData, instanceID: string(m.UID), hostname: guestHostname(m.Name)})
		if err != nil {
			return providersdk.CreateResult{}, err
		}
		if err := s.do(ctx, "UploadSeed", "upload the seed of domain "+spec.name, func(l *libvirt.Libvirt) error {
			return uploadVolume(l, *spec.seed, iso, "raw")
		}); err != nil {
			return providersdk.CreateResult{}, err
		}
	}
	x, err := buildDomain(spec)
	if err != nil {
		return providersdk.CreateResult{}, fmt.Errorf("failed to render the domain XML: %w", err)
	}
	err = s.do(ctx, "DefineDomain", "define and start domain "+spec.name, func(l *libvirt.Libvirt) error {
		dom, err := l.DomainDefineXMLFlags(x, 0)
		if err != nil {
			if other, lerr := l.DomainLookupByName(spec.name); lerr == nil && uuidString(other.UUID) != spec.uuid {
				return providersdk.Permanent(infrav1.MachineNameConflictReason,
					"a domain named %q already exists on the host and is not this machine's (its UUID is %s); rename or remove it",
					spec.name, uuidString(other.UUID))
			}
			return err
		}
		if err := s.hook("defined"); err != nil {
			return err
		}
		if desiredPower(m) == banlieuev1.PowerStatePoweredOff {
			return nil
		}
		return l.DomainCreate(dom)
	})
	return providersdk.CreateResult{}, err
}

// machineDisks are the machine's disks; a machine whose class has none gets one boot
// disk, "root", the size of its image.
func machineDisks(m *providersdk.Machine) []infrav1.MachineDisk {
	if len(m.Spec.Disks) > 0 {
		return m.Spec.Disks
	}
	return []infrav1.MachineDisk{{Name: "root"}}
}

// hook runs the driver's test hook for a stage of Create.
func (s *session) hook(stage string) error {
	if s.driver.createHook == nil {
		return nil
	}
	return s.driver.createHook(stage)
}

// domainSpec plans the machine's domain: names, hardware, volumes and NICs.
func (s *session) domainSpec(m *providersdk.Machine, opts *infrav1.LibvirtOptions, h *hostInfo) domainSpec {
	spec := domainSpec{
		name:        domainName(m.Namespace, m.Name),
		uuid:        string(m.UID),
		domainType:  h.domainType,
		arch:        h.arch,
		machineType: opts.MachineType,
		cpuMode:     opts.CPUMode,
		cpus:        uint(max(m.Spec.Hardware.CPUs, 1)),
		memoryMiB:   uint(max(m.Spec.Hardware.MemoryMiB, 64)),
		firmware:    m.Spec.Hardware.Firmware,
		meta:        machineMetadata{UID: string(m.UID), Namespace: m.Namespace, Name: m.Name},
	}
	if spec.machineType == "" && (h.domainType == "kvm" || h.domainType == "qemu") {
		// q35 has the SATA controller the seed CD-ROM sits on, and the SMM Secure Boot needs.
		spec.machineType = "q35"
	}
	for i, d := range machineDisks(m) {
		pool := s.diskPool(d, i, opts)
		v := diskDevice{vol: volumeRef{pool: pool, name: string(m.UID) + "-" + d.Name + ".qcow2"}, format: "qcow2"}
		spec.disks = append(spec.disks, v)
		spec.meta.Volumes = append(spec.meta.Volumes, v.vol.String())
	}
	if m.Spec.UserData != nil {
		pool := s.defaultPool()
		if len(spec.disks) > 0 {
			pool = spec.disks[0].vol.pool
		}
		spec.seed = &volumeRef{pool: pool, name: string(m.UID) + "-cidata.iso"}
		spec.meta.Volumes = append(spec.meta.Volumes, spec.seed.String())
	}
	for _, n := range m.Spec.Interfaces {
		nic := nicDevice{network: n.Target[TargetNetwork], bridge: n.Target[TargetBridge], mtu: uint(max(n.MTU, 0))}
		if nic.network == "" && nic.bridge == "" {
			nic.network = s.params[ParamNetwork]
			if nic.network == "" {
				nic.network = "default"
			}
		}
		spec.nics = append(spec.nics, nic)
	}
	return spec
}

// diskPool is the pool of disk i: its storage class's pool, the machine's storagePool
// for the boot disk, the Provider's pool parameter, or "default".
func (s *session) diskPool(d infrav1.MachineDisk, i int, opts *infrav1.LibvirtOptions) string {
	if i == 0 && opts.StoragePool != "" {
		return opts.StoragePool
	}
	if p := d.Target[TargetPool]; p != "" {
		return p
	}
	return s.defaultPool()
}

// defaultPool is the Provider's pool parameter, or "default".
func (s *session) defaultPool() string {
	if p := s.params[ParamPool]; p != "" {
		return p
	}
	return "default"
}

// domainName is "<namespace>-<name>", shortened with a hash when longer than 100
// characters, which keeps file names libvirt derives from it well within limits.
func domainName(namespace, name string) string {
	n := namespace + "-" + name
	if len(n) <= 100 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return strings.TrimRight(n[:91], "-.") + "-" + hex.EncodeToString(sum[:4])
}

// uuidString formats a libvirt UUID.
func uuidString(u libvirt.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ensureDisk makes disk i of the machine unless it exists: the first disk as an overlay
// on (or, in pools that cannot back a volume with another, a copy of) the image, the
// others blank.
func (s *session) ensureDisk(l *libvirt.Libvirt, m *providersdk.Machine, i int, d infrav1.MachineDisk, dev diskDevice) error {
	pool, err := l.StoragePoolLookupByName(dev.vol.pool)
	if err != nil {
		if isCode(err, libvirt.ErrNoStoragePool) {
			return providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "storage pool %q of disk %q does not exist on the host", dev.vol.pool, d.Name)
		}
		return err
	}
	if _, err := l.StorageVolLookupByName(pool, dev.vol.name); err == nil {
		return nil
	} else if !isCode(err, libvirt.ErrNoStorageVol) {
		return err
	}
	want := uint64(max(d.SizeGiB, 0)) * gib
	vol := &libvirtxml.StorageVolume{
		Name:     dev.vol.name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: want},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: dev.format}},
	}
	if d.Provisioning == banlieuev1.DiskProvisioningThick || d.Provisioning == banlieuev1.DiskProvisioningEagerZeroed {
		vol.Allocation = &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: want}
	} else {
		vol.Allocation = &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0}
	}
	if i > 0 {
		return createVolume(l, pool, vol, nil)
	}
	img, imgVol, err := s.imageVolume(l, m)
	if err != nil {
		return err
	}
	if d.SizeGiB == 0 {
		want = img.Capacity.Value
		vol.Capacity.Value = want
	}
	if want < img.Capacity.Value {
		return providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
			"the image is %d GiB, larger than the %d GiB disk %q asks for; disks cannot shrink", img.Capacity.Value/gib, d.SizeGiB, d.Name)
	}
	poolXML, err := l.StoragePoolGetXMLDesc(pool, 0)
	if err != nil {
		return err
	}
	p := &libvirtxml.StoragePool{}
	if err := p.Unmarshal(poolXML); err != nil {
		return err
	}
	imgFormat := "raw"
	if img.Target != nil && img.Target.Format != nil && img.Target.Format.Type != "" {
		imgFormat = img.Target.Format.Type
	}
	switch p.Type {
	case "dir", "fs", "netfs":
		vol.BackingStore = &libvirtxml.StorageVolumeBackingStore{
			Path: img.Target.Path, Format: &libvirtxml.StorageVolumeTargetFormat{Type: imgFormat},
		}
		return createVolume(l, pool, vol, nil)
	}
	// Block-backed pools (logical, disk, iSCSI, RBD…) hold no qcow2 overlays: copy.
	vol.Target.Format.Type = imgFormat
	return createVolume(l, pool, vol, &imgVol)
}

// createVolume creates vol in pool, as a copy of from when from is set.
func createVolume(l *libvirt.Libvirt, pool libvirt.StoragePool, vol *libvirtxml.StorageVolume, from *libvirt.StorageVol) error {
	x, err := vol.Marshal()
	if err != nil {
		return err
	}
	if from != nil {
		_, err = l.StorageVolCreateXMLFrom(pool, x, *from, 0)
	} else {
		_, err = l.StorageVolCreateXML(pool, x, 0)
	}
	if err != nil {
		return fmt.Errorf("failed to create volume %s/%s: %w", pool.Name, vol.Name, err)
	}
	return nil
}

// imageVolume finds the machine's image volume: the image's resolvedRef (or ref), as
// "<pool>/<volume>" or an absolute path.
func (s *session) imageVolume(l *libvirt.Libvirt, m *providersdk.Machine) (*libvirtxml.StorageVolume, libvirt.StorageVol, error) {
	ref := m.Spec.Image.ResolvedRef
	if ref == "" {
		ref = m.Spec.Image.Ref
	}
	vol, found, err := lookupVolume(l, ref)
	if err != nil {
		return nil, vol, err
	}
	if !found {
		return nil, vol, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "image volume %q does not exist on the host", ref)
	}
	x, err := l.StorageVolGetXMLDesc(vol, 0)
	if err != nil {
		return nil, vol, err
	}
	img := &libvirtxml.StorageVolume{}
	if err := img.Unmarshal(x); err != nil {
		return nil, vol, err
	}
	if img.Capacity == nil || img.Target == nil {
		return nil, vol, fmt.Errorf("image volume %q reports no capacity or path", ref)
	}
	return img, vol, nil
}

// lookupVolume finds a volume by "<pool>/<volume>" or absolute path.
func lookupVolume(l *libvirt.Libvirt, ref string) (libvirt.StorageVol, bool, error) {
	var (
		vol libvirt.StorageVol
		err error
	)
	if strings.HasPrefix(ref, "/") {
		vol, err = l.StorageVolLookupByPath(ref)
	} else {
		poolName, name, ok := strings.Cut(ref, "/")
		if !ok || poolName == "" || name == "" {
			return vol, false, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "image %q is neither <pool>/<volume> nor an absolute path", ref)
		}
		vol, err = findVolume(l, volumeRef{pool: poolName, name: name})
	}
	if isCode(err, libvirt.ErrNoStorageVol, libvirt.ErrNoStoragePool) {
		return vol, false, nil
	}
	return vol, err == nil, err
}

// findVolume looks a volume up by pool and name.
func findVolume(l *libvirt.Libvirt, ref volumeRef) (libvirt.StorageVol, error) {
	pool, err := l.StoragePoolLookupByName(ref.pool)
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	return l.StorageVolLookupByName(pool, ref.name)
}

// uploadVolume writes data into the volume ref, creating it (or recreating it with
// the right size) first, through libvirt's upload stream, which reaches remote hosts.
func uploadVolume(l *libvirt.Libvirt, ref volumeRef, data []byte, format string) error {
	pool, err := l.StoragePoolLookupByName(ref.pool)
	if err != nil {
		return err
	}
	vol, err := l.StorageVolLookupByName(pool, ref.name)
	switch {
	case err == nil:
		if _, capacity, _, err := l.StorageVolGetInfo(vol); err != nil || capacity != uint64(len(data)) {
			if err := l.StorageVolDelete(vol, 0); err != nil {
				return err
			}
			vol.Name = ""
		}
	case !isCode(err, libvirt.ErrNoStorageVol):
		return err
	}
	if vol.Name == "" {
		x, err := (&libvirtxml.StorageVolume{
			Name:     ref.name,
			Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(len(data))},
			Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
		}).Marshal()
		if err != nil {
			return err
		}
		if vol, err = l.StorageVolCreateXML(pool, x, 0); err != nil {
			return fmt.Errorf("failed to create volume %s: %w", ref, err)
		}
	}
	if err := l.StorageVolUpload(vol, bytes.NewReader(data), 0, uint64(len(data)), 0); err != nil {
		return fmt.Errorf("failed to upload volume %s: %w", ref, err)
	}
	return nil
}
