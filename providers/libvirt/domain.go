package libvirt

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// MetadataNamespace is the XML namespace of the element banlieue keeps in a domain's
// <metadata>: the machine's identity and the volumes it created.
const MetadataNamespace = "https://banlieue.io/xmlns/libvirt/machine/v1alpha1"

// machineMetadata is banlieue's element in a domain's <metadata>.
type machineMetadata struct {
	XMLName   xml.Name `xml:"https://banlieue.io/xmlns/libvirt/machine/v1alpha1 machine"`
	UID       string   `xml:"uid"`
	Namespace string   `xml:"namespace"`
	Name      string   `xml:"name"`
	// Volumes are "<pool>/<volume>" of the volumes made for the machine, deleted with it.
	Volumes []string `xml:"volume"`
}

// marshal writes the element with the prefix "banlieue": libvirt keeps a metadata
// element only when its namespace has a prefix.
func (m machineMetadata) marshal() string {
	var b strings.Builder
	esc := func(s string) string {
		var out bytes.Buffer
		_ = xml.EscapeText(&out, []byte(s))
		return out.String()
	}
	fmt.Fprintf(&b, `<banlieue:machine xmlns:banlieue=%q>`, MetadataNamespace)
	fmt.Fprintf(&b, "<banlieue:uid>%s</banlieue:uid>", esc(m.UID))
	fmt.Fprintf(&b, "<banlieue:namespace>%s</banlieue:namespace>", esc(m.Namespace))
	fmt.Fprintf(&b, "<banlieue:name>%s</banlieue:name>", esc(m.Name))
	for _, v := range m.Volumes {
		fmt.Fprintf(&b, "<banlieue:volume>%s</banlieue:volume>", esc(v))
	}
	b.WriteString("</banlieue:machine>")
	return b.String()
}

// domainSpec is everything a machine's domain is built from.
type domainSpec struct {
	name, uuid string
	// domainType is the hypervisor: kvm, qemu (TCG) or test.
	domainType  string
	arch        string
	machineType string
	cpuMode     string
	cpus        uint
	memoryMiB   uint
	firmware    banlieuev1.Firmware
	disks       []diskDevice
	// seed is the NoCloud seed volume, attached as a CD-ROM; nil for none.
	seed *volumeRef
	nics []nicDevice
	meta machineMetadata
}

// volumeRef is a storage volume by pool and name.
type volumeRef struct {
	pool, name string
}

// String returns "<pool>/<name>".
func (v volumeRef) String() string { return v.pool + "/" + v.name }

// diskDevice is a disk of the domain.
type diskDevice struct {
	vol    volumeRef
	format string
}

// device is the disk as the domain's disk i: virtio, vda for the first.
func (d diskDevice) device(i int) libvirtxml.DomainDisk {
	return libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: d.format},
		Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: d.vol.pool, Volume: d.vol.name}},
		Target: &libvirtxml.DomainDiskTarget{Dev: "vd" + diskLetters(i), Bus: "virtio"},
	}
}

// nicDevice is a NIC on a libvirt network or a host bridge.
type nicDevice struct {
	network, bridge string
	mtu             uint
}

// buildDomain renders the domain XML of spec. Disks are virtio (vda, vdb, …), the seed
// a SATA CD-ROM; there is no graphics device (a serial console instead) and a virtio
// channel for the QEMU guest agent, which reports addresses on networks without DHCP
// leases.
func buildDomain(spec domainSpec) (string, error) {
	d := &libvirtxml.Domain{
		Type:          spec.domainType,
		Name:          spec.name,
		UUID:          spec.uuid,
		Metadata:      &libvirtxml.DomainMetadata{XML: spec.meta.marshal()},
		Memory:        &libvirtxml.DomainMemory{Value: spec.memoryMiB, Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: spec.memoryMiB, Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: spec.cpus},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Type: "hvm", Arch: spec.arch, Machine: spec.machineType},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices:    &libvirtxml.DomainDeviceList{},
	}
	if spec.cpuMode != "" {
		d.CPU = &libvirtxml.DomainCPU{Mode: spec.cpuMode}
	}
	switch spec.firmware {
	case banlieuev1.FirmwareEFI:
		d.OS.Firmware = "efi"
		d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{{Enabled: "no", Name: "secure-boot"}}}
	case banlieuev1.FirmwareEFISecure:
		d.OS.Firmware = "efi"
		d.OS.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
			{Enabled: "yes", Name: "secure-boot"}, {Enabled: "yes", Name: "enrolled-keys"},
		}}
		// Secure Boot firmware keeps its variables safe from the guest through SMM.
		d.Features.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	for i, disk := range spec.disks {
		d.Devices.Disks = append(d.Devices.Disks, disk.device(i))
	}
	if spec.seed != nil {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: spec.seed.pool, Volume: spec.seed.name}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	for _, n := range spec.nics {
		nic := libvirtxml.DomainInterface{Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"}}
		if n.bridge != "" {
			nic.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.bridge}}
		} else {
			nic.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: n.network}}
		}
		if n.mtu > 0 {
			nic.MTU = &libvirtxml.DomainInterfaceMTU{Size: n.mtu}
		}
		d.Devices.Interfaces = append(d.Devices.Interfaces, nic)
	}
	if spec.domainType != "test" {
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

// diskLetters names disk i as Linux does: a to z, then aa and so on.
func diskLetters(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('a'+(i-1)%26)) + s
	}
	return s
}

// observedDomain is what banlieue reads back from a domain's XML.
type observedDomain struct {
	name, uuid string
	cpus       uint
	memoryMiB  uint
	meta       *machineMetadata
	// disks are the volumes of the domain's disk devices (not CD-ROMs), in order.
	disks []volumeRef
	macs  []string
	// networks are the libvirt networks of the NICs, for DHCP leases.
	networks []string
	nvram    bool
}

// parseDomain reads a domain's XML.
func parseDomain(x string) (*observedDomain, error) {
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("failed to parse the domain XML: %w", err)
	}
	o := &observedDomain{name: d.Name, uuid: d.UUID}
	if d.VCPU != nil {
		o.cpus = d.VCPU.Value
	}
	if d.Memory != nil {
		o.memoryMiB = toMiB(d.Memory.Value, d.Memory.Unit)
	}
	if d.Metadata != nil {
		o.meta = findMetadata(d.Metadata.XML)
	}
	if d.OS != nil && (d.OS.NVRam != nil || d.OS.Firmware == "efi") {
		o.nvram = true
	}
	if d.Devices != nil {
		for _, disk := range d.Devices.Disks {
			if disk.Device != "disk" && disk.Device != "" {
				continue
			}
			if disk.Source != nil && disk.Source.Volume != nil {
				o.disks = append(o.disks, volumeRef{pool: disk.Source.Volume.Pool, name: disk.Source.Volume.Volume})
			}
		}
		for _, n := range d.Devices.Interfaces {
			if n.MAC != nil {
				o.macs = append(o.macs, strings.ToLower(n.MAC.Address))
			}
			if n.Source != nil && n.Source.Network != nil && !slices.Contains(o.networks, n.Source.Network.Network) {
				o.networks = append(o.networks, n.Source.Network.Network)
			}
		}
	}
	return o, nil
}

// findMetadata finds banlieue's element among a domain's metadata elements; nil when
// there is none.
func findMetadata(inner string) *machineMetadata {
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
		m := &machineMetadata{}
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
