package host

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// MetadataNamespace is the XML namespace of the element banlieue keeps in a domain's
// <metadata>: the machine's identity and the volumes it created.
const MetadataNamespace = "https://banlieue.io/xmlns/libvirt/machine/v1alpha1"

// Metadata is banlieue's element in a domain's <metadata>: whose domain it is.
type Metadata struct {
	XMLName xml.Name `xml:"https://banlieue.io/xmlns/libvirt/machine/v1alpha1 machine"`
	// UID is the machine's UID.
	UID string `xml:"uid"`
	// Namespace is the machine's namespace.
	Namespace string `xml:"namespace"`
	// Name is the machine's name.
	Name string `xml:"name"`
	// Cluster identifies the machine's cluster (providersdk.Machine.ClusterID); "" for a
	// domain marked before marks named it.
	Cluster string `xml:"cluster,omitempty"`
	// Volumes are "<pool>/<volume>" of the volumes made for the machine, deleted with it.
	Volumes []string `xml:"volume"`
	// Hotplug names what the domain was created to grow while it runs, "cpu" and
	// "memory": its <vcpu> maximum and <maxMemory> are set again when it is resized
	// while shut off. libvirt drops <vcpu current> once the domain runs all its CPUs,
	// so only this tells such a domain from one made without headroom.
	Hotplug []string `xml:"hotplug"`
}

// marshal writes the element with the prefix "banlieue": libvirt keeps a metadata
// element only when its namespace has a prefix.
func (m Metadata) marshal() string { return m.write("banlieue") }

// write writes the element, its name and its children's with prefix (and the element
// declaring the prefix's namespace), or with none when prefix is "".
func (m Metadata) write(prefix string) string {
	var b strings.Builder
	esc := func(s string) string {
		var out bytes.Buffer
		_ = xml.EscapeText(&out, []byte(s))
		return out.String()
	}
	name := func(local string) string {
		if prefix == "" {
			return local
		}
		return prefix + ":" + local
	}
	if prefix == "" {
		b.WriteString("<machine>")
	} else {
		fmt.Fprintf(&b, `<%s xmlns:%s=%q>`, name("machine"), prefix, MetadataNamespace)
	}
	field := func(local, v string) { fmt.Fprintf(&b, "<%s>%s</%s>", name(local), esc(v), name(local)) }
	field("uid", m.UID)
	field("namespace", m.Namespace)
	field("name", m.Name)
	if m.Cluster != "" {
		field("cluster", m.Cluster)
	}
	for _, v := range m.Volumes {
		field("volume", v)
	}
	for _, v := range m.Hotplug {
		field("hotplug", v)
	}
	fmt.Fprintf(&b, "</%s>", name("machine"))
	return b.String()
}

// DomainSpec is everything a domain is defined from.
type DomainSpec struct {
	// Name and UUID are the domain's.
	Name, UUID string
	// Type is the hypervisor: kvm, qemu (TCG) or test.
	Type string
	// Arch is the guest architecture, e.g. x86_64.
	Arch string
	// MachineType is the machine type, e.g. q35; the hypervisor's default when empty.
	MachineType string
	// CPUMode is the CPU mode, e.g. host-passthrough; the hypervisor's default when empty.
	CPUMode string
	// CPUs is the virtual CPU count.
	CPUs uint
	// MaxCPUs is the most virtual CPUs the domain may run, its <vcpu> maximum, of
	// which CPUs run at first; CPUs when it is not larger.
	MaxCPUs uint
	// MemoryMiB is the memory in MiB.
	MemoryMiB uint
	// MaxMemoryMiB is the <maxMemory> DIMMs plugged while the domain runs may grow its
	// memory to; 0 for none. With it the domain has one NUMA cell, which DIMMs need,
	// holding all its CPUs and MemoryMiB; <maxMemory> itself only when it is above
	// MemoryMiB (setMaxMemory).
	MaxMemoryMiB uint
	// MemorySlots is the number of DIMMs <maxMemory> has room for.
	MemorySlots uint
	// EFI selects UEFI firmware (libvirt's firmware auto-selection) instead of BIOS.
	EFI bool
	// SecureBoot selects UEFI with Secure Boot and enrolled keys, with SMM on.
	SecureBoot bool
	// Disks are the domain's disks, in bus order: vda, vdb, …
	Disks []Disk
	// Seed is the volume attached as a SATA CD-ROM (a NoCloud seed); nil for none.
	Seed *VolumeRef
	// NICs are the domain's network interfaces.
	NICs []NIC
	// Metadata is banlieue's element in the domain's <metadata>; nil for none.
	Metadata *Metadata
}

// Disk is a disk of a domain: a volume.
type Disk struct {
	// Volume is the disk's volume.
	Volume VolumeRef
	// Format is the volume's format, e.g. qcow2.
	Format string
}

// device is the disk as the domain's disk i: virtio, vda for the first.
func (d Disk) device(i int) libvirtxml.DomainDisk {
	return libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: d.Format},
		Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: d.Volume.Pool, Volume: d.Volume.Name}},
		Target: &libvirtxml.DomainDiskTarget{Dev: "vd" + diskLetters(i), Bus: "virtio"},
	}
}

// NIC is a virtio network interface on a libvirt network or a host bridge.
type NIC struct {
	// Network is the libvirt network; used when Bridge is empty.
	Network string
	// Bridge is the host bridge.
	Bridge string
	// MTU is the interface's MTU; the network's when 0.
	MTU uint
	// MAC is the NIC's MAC address; libvirt gives it one when empty.
	MAC string
}

// renderDomain renders the domain XML of spec. Disks are virtio (vda, vdb, …), the seed
// a SATA CD-ROM; there is no graphics device (a serial console instead) and a virtio
// channel for the QEMU guest agent, which reports addresses on networks without DHCP
// leases.
func renderDomain(spec DomainSpec) (string, error) {
	d := &libvirtxml.Domain{
		Type:          spec.Type,
		Name:          spec.Name,
		UUID:          spec.UUID,
		Memory:        &libvirtxml.DomainMemory{Value: spec.MemoryMiB, Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: spec.MemoryMiB, Unit: "MiB"},
		VCPU:          vcpu(nil, spec.CPUs, spec.MaxCPUs),
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Type: "hvm", Arch: spec.Arch, Machine: spec.MachineType},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices:    &libvirtxml.DomainDeviceList{},
	}
	if spec.Metadata != nil {
		d.Metadata = &libvirtxml.DomainMetadata{XML: spec.Metadata.marshal()}
	}
	if spec.CPUMode != "" {
		d.CPU = &libvirtxml.DomainCPU{Mode: spec.CPUMode}
	}
	if spec.MaxMemoryMiB > 0 {
		setMaxMemory(d, spec.MaxMemoryMiB, spec.MemorySlots)
		setNUMACell(d, spec.MemoryMiB)
	}
	switch {
	case spec.SecureBoot:
		d.OS.Firmware = "efi"
		d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
			{Enabled: "yes", Name: "secure-boot"}, {Enabled: "yes", Name: "enrolled-keys"},
		}}
		// Secure Boot firmware keeps its variables safe from the guest through SMM.
		d.Features.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	case spec.EFI:
		d.OS.Firmware = "efi"
		d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{{Enabled: "no", Name: "secure-boot"}}}
	}
	for i, disk := range spec.Disks {
		d.Devices.Disks = append(d.Devices.Disks, disk.device(i))
	}
	if spec.Seed != nil {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: spec.Seed.Pool, Volume: spec.Seed.Name}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	for _, n := range spec.NICs {
		nic := libvirtxml.DomainInterface{Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"}}
		if n.Bridge != "" {
			nic.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.Bridge}}
		} else {
			nic.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: n.Network}}
		}
		if n.MTU > 0 {
			nic.MTU = &libvirtxml.DomainInterfaceMTU{Size: n.MTU}
		}
		if n.MAC != "" {
			nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: n.MAC}
		}
		d.Devices.Interfaces = append(d.Devices.Interfaces, nic)
	}
	if spec.Type != "test" {
		d.Devices.Serials = []libvirtxml.DomainSerial{{Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}}}}
		d.Devices.Consoles = []libvirtxml.DomainConsole{{Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainConsoleTarget{Type: "serial"}}}
		d.Devices.Channels = []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
		}}
	}
	return d.Marshal()
}

// vcpu is a <vcpu> of cpus running, of at most maxCPUs (cpus when not larger), with
// old's placement and CPU set when there is an old one.
func vcpu(old *libvirtxml.DomainVCPU, cpus, maxCPUs uint) *libvirtxml.DomainVCPU {
	v := &libvirtxml.DomainVCPU{Placement: "static", Value: max(cpus, maxCPUs)}
	if old != nil {
		v.Placement, v.CPUSet = cmp.Or(old.Placement, v.Placement), old.CPUSet
	}
	if v.Value > cpus {
		v.Current = cpus
	}
	return v
}

// setMaxMemory gives d a <maxMemory> of maxMiB with room for slots DIMMs; a
// <maxMemory> d has keeps its slots. When maxMiB is not above d's memory, d gets none:
// QEMU refuses memory slots without room above the initial memory ("memory slots were
// specified but maximum memory size is equal to the initial memory size").
func setMaxMemory(d *libvirtxml.Domain, maxMiB, slots uint) {
	if d.MaximumMemory != nil && d.MaximumMemory.Slots > 0 {
		slots = d.MaximumMemory.Slots
	}
	if d.Memory != nil && maxMiB <= toMiB(d.Memory.Value, d.Memory.Unit) {
		d.MaximumMemory = nil
		return
	}
	d.MaximumMemory = &libvirtxml.DomainMaxMemory{Value: maxMiB << 10, Unit: "KiB", Slots: slots}
}

// setNUMACell gives d, unless it has several NUMA cells, one cell 0 with all its
// virtual CPUs (up to the <vcpu> maximum) and memoryMiB: DIMMs plug into a NUMA node.
// It reports whether d has that one cell.
func setNUMACell(d *libvirtxml.Domain, memoryMiB uint) bool {
	if d.CPU == nil {
		d.CPU = &libvirtxml.DomainCPU{}
	}
	if d.CPU.Numa == nil {
		d.CPU.Numa = &libvirtxml.DomainNuma{}
	}
	switch len(d.CPU.Numa.Cell) {
	case 0:
		d.CPU.Numa.Cell = []libvirtxml.DomainCell{{ID: new(uint)}}
	case 1:
	default:
		return false // another tool's topology, left alone
	}
	cell := &d.CPU.Numa.Cell[0]
	cell.CPUs = "0"
	if n := d.VCPU.Value; n > 1 {
		cell.CPUs = fmt.Sprintf("0-%d", n-1)
	}
	cell.Memory, cell.Unit = memoryMiB<<10, "KiB"
	return true
}

// diskLetters names disk i as Linux does: a to z, then aa and so on.
func diskLetters(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('a'+(i-1)%26)) + s
	}
	return s
}

// parseDomain reads what banlieue needs of a domain's XML into a Domain, without its
// state and disk sizes.
func parseDomain(x string) (*Domain, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("failed to parse the domain XML: %w", err)
	}
	o := &Domain{Name: d.Name, UUID: d.UUID}
	if d.VCPU != nil {
		o.CPUs, o.MaxCPUs = cmp.Or(d.VCPU.Current, d.VCPU.Value), d.VCPU.Value
	}
	if d.Memory != nil {
		// With DIMMs, <memory> is the whole: the NUMA cells' and the DIMMs'.
		o.MemoryMiB = toMiB(d.Memory.Value, d.Memory.Unit)
	}
	if d.MaximumMemory != nil {
		o.MaxMemoryMiB, o.MemorySlots = toMiB(d.MaximumMemory.Value, d.MaximumMemory.Unit), d.MaximumMemory.Slots
	}
	if d.CPU != nil && d.CPU.Numa != nil {
		o.NUMACells = len(d.CPU.Numa.Cell)
	}
	if d.OS != nil && d.OS.Type != nil {
		o.Arch = d.OS.Type.Arch
	}
	if d.Metadata != nil {
		o.Metadata = findMetadata(d.Metadata.XML)
		o.BootID = findBootID(d.Metadata.XML)
	}
	if d.OS != nil && (d.OS.NVRam != nil || d.OS.Firmware == "efi") {
		o.NVRAM = true
	}
	o.EFI = o.NVRAM || (d.OS != nil && d.OS.Loader != nil && d.OS.Loader.Type == "pflash")
	if d.Devices != nil {
		for _, disk := range d.Devices.Disks {
			if disk.Device != "disk" && disk.Device != "" {
				continue
			}
			o.DiskDevices++
			if disk.Source != nil && disk.Source.Volume != nil {
				o.Disks = append(o.Disks, VolumeRef{Pool: disk.Source.Volume.Pool, Name: disk.Source.Volume.Volume})
			}
		}
		o.MemoryDevices = len(d.Devices.Memorydevs)
		for _, n := range d.Devices.Interfaces {
			if n.MAC != nil {
				o.MACs = append(o.MACs, strings.ToLower(n.MAC.Address))
			}
			if n.Source != nil && n.Source.Network != nil && !slices.Contains(o.Networks, n.Source.Network.Network) {
				o.Networks = append(o.Networks, n.Source.Network.Network)
			}
		}
	}
	return o, nil
}

// findMetadata finds banlieue's element among a domain's metadata elements; nil when
// there is none.
func findMetadata(inner string) *Metadata {
	dec := xml.NewDecoder(strings.NewReader(inner))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Space != MetadataNamespace || se.Name.Local != "machine" {
			continue
		}
		m := &Metadata{}
		if err := dec.DecodeElement(m, &se); err != nil {
			return nil
		}
		return m
	}
}

// toMiB converts a libvirt memory amount (KiB when unit is empty) to MiB.
func toMiB(v uint, unit string) uint {
	switch strings.ToLower(unit) {
	case "b", "bytes":
		return v >> 20
	case "", "k", "kib":
		return v >> 10
	case "g", "gib":
		return v << 10
	case "kb":
		return uint(uint64(v) * 1000 >> 20)
	case "mb":
		return uint(uint64(v) * 1000 * 1000 >> 20)
	}
	return v
}

// ownMetadata matches banlieue's element as libvirt writes it back: with the prefix it
// was given, its namespace declared on it.
var ownMetadata = regexp.MustCompile(`(?s)<([A-Za-z_][\w.-]*):machine\s+xmlns:[A-Za-z_][\w.-]*="` + regexp.QuoteMeta(MetadataNamespace) + `"\s*>.*?</[A-Za-z_][\w.-]*:machine>`)

// stripMetadata removes banlieue's element from a domain's metadata elements.
func stripMetadata(inner string) string {
	return strings.TrimSpace(ownMetadata.ReplaceAllString(inner, ""))
}

// replaceMetadata returns a domain's metadata elements with banlieue's replaced by m,
// keeping other tools' elements.
func replaceMetadata(old *libvirtxml.DomainMetadata, m Metadata) string {
	if old == nil {
		return m.marshal()
	}
	return stripMetadata(old.XML) + m.marshal()
}
