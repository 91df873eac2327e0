package libvirt

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/utils/ptr"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// Create makes the machine's volumes (a qcow2 overlay on the image for the first disk,
// blank volumes for the others, the NoCloud seed), then defines the domain, with the
// headroom the Provider's hotplug parameters give, and starts it unless the machine
// asks for PoweredOff. obs, from Observe, says no domain exists; yet every step finds
// what an earlier, interrupted Create made and keeps it (volumes by name, the domain by
// UUID when it is defined), so a provider that crashed mid-create never makes a second
// domain or volume.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
	id, err := machineUUID(m)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	if s.hotplugErr != nil {
		// The headroom is fixed at creation: a domain made without the headroom the
		// Provider means to give would keep that lack. Retried until it is fixed.
		return providersdk.CreateResult{}, fmt.Errorf("failed to create the domain: %w", s.hotplugErr)
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	opts := &infrav1.LibvirtOptions{}
	if err := m.Options("libvirt", opts); err != nil {
		return providersdk.CreateResult{}, err
	}
	spec := s.domainSpec(m, id, opts, h, s.hotplug)
	for i, d := range machineDisks(m) {
		if err := s.ensureDisk(ctx, m, i, d, spec.Disks[i]); err != nil {
			return providersdk.CreateResult{}, err
		}
	}
	if err := s.hook("volumes"); err != nil {
		return providersdk.CreateResult{}, err
	}
	if spec.Seed != nil {
		seed, err := nocloud.MachineSeed(m)
		if err != nil {
			return providersdk.CreateResult{}, err
		}
		iso, err := seed.BuildISO()
		if err != nil {
			return providersdk.CreateResult{}, err
		}
		if err := s.host.UploadVolume(ctx, *spec.Seed, iso, "raw"); err != nil {
			return providersdk.CreateResult{}, err
		}
	}
	dom, err := s.host.DefineDomain(ctx, spec)
	var inUse *host.NameInUseError
	if errors.As(err, &inUse) {
		return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineNameConflictReason,
			"a domain named %q already exists on the host and is not this machine's (its UUID is %s); rename or remove it",
			inUse.Name, inUse.UUID)
	}
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	// The domain may be one an interrupted Create defined: it must be the machine's.
	if err := checkIdentity(m, dom); err != nil {
		return providersdk.CreateResult{}, err
	}
	res := providersdk.CreateResult{Details: &infrav1.LibvirtStatus{DomainUUID: dom.UUID, DomainName: dom.Name, Volumes: dom.Metadata.Volumes}}
	if err := s.hook("defined"); err != nil {
		return res, err
	}
	if m.DesiredPower() == banlieuev1.PowerStatePoweredOff || dom.State != host.StateShutoff {
		return res, nil // one an interrupted Create started already runs
	}
	return res, s.start(ctx, dom)
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

// machineMetadata is banlieue's metadata element of the machine's domain, before its
// volumes: the machine and its cluster.
func machineMetadata(m *providersdk.Machine) host.Metadata {
	return host.Metadata{UID: string(m.UID), Namespace: m.Namespace, Name: m.Name, Cluster: m.ClusterID}
}

// domainSpec plans the machine's domain, whose UUID is id: names, hardware with the
// headroom hot gives (hotplug.Limits), volumes and NICs.
func (s *session) domainSpec(m *providersdk.Machine, id string, opts *infrav1.LibvirtOptions, h *hostInfo, hot providersdk.Hotplug) host.DomainSpec {
	spec := host.DomainSpec{
		Name:        domainName(m.Namespace, m.Name),
		UUID:        id,
		Type:        h.domainType,
		Arch:        h.arch,
		MachineType: opts.MachineType,
		CPUMode:     opts.CPUMode,
		CPUs:        uint(max(m.Spec.Hardware.CPUs, 1)),
		MemoryMiB:   uint(max(m.Spec.Hardware.MemoryMiB, 64)),
		EFI:         m.Spec.Hardware.Firmware == banlieuev1.FirmwareEFI || m.Spec.Hardware.Firmware == banlieuev1.FirmwareEFISecure,
		SecureBoot:  m.Spec.Hardware.Firmware == banlieuev1.FirmwareEFISecure,
		Metadata:    ptr.To(machineMetadata(m)),
	}
	maxCPUs, maxMemoryMiB := hot.Limits(int32(spec.CPUs), int64(spec.MemoryMiB))
	spec.MaxCPUs = uint(maxCPUs)
	if hot.Memory {
		spec.MaxMemoryMiB, spec.MemorySlots = uint(maxMemoryMiB), memorySlots
	}
	spec.Metadata.Hotplug = hotplugKinds(hot)
	if spec.MachineType == "" && (h.domainType == "kvm" || h.domainType == "qemu") {
		// q35 has the SATA controller the seed CD-ROM sits on, and the SMM Secure Boot needs.
		spec.MachineType = "q35"
	}
	disks, seed := s.machineVolumes(m, opts)
	for _, v := range disks {
		spec.Disks = append(spec.Disks, host.Disk{Volume: v, Format: "qcow2"})
		spec.Metadata.Volumes = append(spec.Metadata.Volumes, v.String())
	}
	// libvirt's test driver runs no guest to read a seed, and cannot upload one
	// (virStorageVolUpload).
	if seed != nil && h.domainType != "test" {
		spec.Seed = seed
		spec.Metadata.Volumes = append(spec.Metadata.Volumes, seed.String())
	}
	macs := nocloud.MachineMACs(m)
	for i, n := range m.Spec.Interfaces {
		nic := host.NIC{Network: n.Target[TargetNetwork], Bridge: n.Target[TargetBridge], MTU: uint(max(n.MTU, 0))}
		if macs != nil {
			nic.MAC = macs[i] // the seed's network-config finds the NIC by it
		}
		if nic.Network == "" && nic.Bridge == "" {
			nic.Network = s.params[ParamNetwork]
			if nic.Network == "" {
				nic.Network = "default"
			}
		}
		spec.NICs = append(spec.NICs, nic)
	}
	return spec
}

// machineVolumes are the volumes the machine's spec makes: one per disk, in its
// pool, and the NoCloud seed beside the boot disk. Every machine banlieue creates has
// a seed, user data or not: its meta-data gives the guest its instance ID and host
// name (cloud-init without a data source leaves it "localhost"), its network-config
// the static addresses. An adopted domain has none.
func (s *session) machineVolumes(m *providersdk.Machine, opts *infrav1.LibvirtOptions) (disks []host.VolumeRef, seed *host.VolumeRef) {
	for i, d := range machineDisks(m) {
		disks = append(disks, host.VolumeRef{Pool: s.diskPool(d, i, opts), Name: volumeName(m, d.Name+".qcow2")})
	}
	if !m.Spec.Adopts() {
		pool := s.defaultPool()
		if len(disks) > 0 {
			pool = disks[0].Pool
		}
		seed = &host.VolumeRef{Pool: pool, Name: volumeName(m, "cidata.iso")}
	}
	return disks, seed
}

// volumeName is the name of a volume made for the machine: "<machine UID>-<suffix>",
// which Delete's sweep finds even when no domain lists it.
func volumeName(m *providersdk.Machine, suffix string) string { return string(m.UID) + "-" + suffix }

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

// domainNames are the names given to domains: libvirt takes a '.', and at most 100
// characters keep the file names libvirt derives from a domain's name (its XML, log and
// NVRAM files) well within limits.
var domainNames = providersdk.NameRules{MaxLen: 100}

// domainName is the machine's domain name, "<namespace>.<name>"
// (providersdk.BackendName): no two machines of any namespaces share it. Lookups go by
// UUID, so a domain named by an older scheme is still found.
func domainName(namespace, name string) string {
	return providersdk.BackendName(namespace, name, domainNames)
}

// ensureDisk makes disk i of the machine unless it exists: the first disk as an overlay
// on (or, in pools that cannot back a volume with another, a copy of) the image, sized
// by the class or else the image; the others blank, preallocated when thick.
func (s *session) ensureDisk(ctx context.Context, m *providersdk.Machine, i int, d infrav1.MachineDisk, disk host.Disk) error {
	_, err := s.host.Volume(ctx, disk.Volume)
	switch {
	case err == nil:
		return nil // made by an earlier, interrupted Create
	case host.IsNotFoundKind(err, host.KindPool):
		return providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "storage pool %q of disk %q does not exist on the host", disk.Volume.Pool, d.Name)
	case !host.IsNotFound(err):
		return err
	}
	spec := host.VolumeSpec{
		Volume:      disk.Volume,
		Format:      disk.Format,
		Capacity:    int64(max(d.SizeGiB, 0)) * providersdk.GiB,
		Preallocate: d.Provisioning == banlieuev1.DiskProvisioningThick || d.Provisioning == banlieuev1.DiskProvisioningEagerZeroed,
	}
	if i > 0 {
		return s.host.CreateVolume(ctx, spec)
	}
	img, err := s.imageVolume(ctx, m)
	if err != nil {
		return err
	}
	if d.SizeGiB == 0 {
		spec.Capacity = img.Capacity
	}
	if spec.Capacity < img.Capacity {
		return providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
			"the image is %d GiB, larger than the %d GiB disk %q asks for; disks cannot shrink", img.Capacity/providersdk.GiB, d.SizeGiB, d.Name)
	}
	spec.Backing = img
	return s.host.CreateVolume(ctx, spec)
}

// imageVolume finds the machine's image volume: the image's resolvedRef (or ref), as
// "<pool>/<volume>" or an absolute path.
func (s *session) imageVolume(ctx context.Context, m *providersdk.Machine) (*host.Volume, error) {
	ref := m.Spec.Image.ResolvedRef
	if ref == "" {
		ref = m.Spec.Image.Ref
	}
	img, err := s.host.LookupVolume(ctx, ref)
	switch {
	case errors.Is(err, host.ErrInvalidRef):
		return nil, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "image %q is neither <pool>/<volume> nor an absolute path", ref)
	case host.IsNotFound(err):
		return nil, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "image volume %q does not exist on the host", ref)
	case err != nil:
		return nil, err
	}
	if img.Capacity == 0 || img.Path == "" {
		return nil, fmt.Errorf("image volume %q reports no capacity or path", ref)
	}
	return img, nil
}
