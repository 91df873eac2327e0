package pve

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Config is a VM's config, every value as a string, as the config file holds it.
type Config map[string]string

// UnmarshalJSON reads PVE's typed config answer (integers for booleans and counts).
func (c *Config) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := Config{}
	for k, v := range raw {
		if s, ok := configValue(v); ok {
			out[k] = s
		}
	}
	*c = out
	return nil
}

// configValue is a typed config value as the config file holds it; false for none.
func configValue(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case nil:
		return "", false
	default:
		return fmt.Sprint(v), true
	}
}

// DiskKeys are the config keys of the VM's disks in bus order, CD-ROMs (and
// cloud-init drives) excepted.
func (c Config) DiskKeys() []string {
	var out []string
	for _, bus := range []string{"scsi", "virtio", "sata", "ide"} {
		for i := range 31 {
			k := bus + strconv.Itoa(i)
			if v, ok := c[k]; ok && !IsCDROM(v) {
				out = append(out, k)
			}
		}
	}
	return out
}

// NICKeys are the config keys of the VM's NICs in order: net0, net1 and so on.
func (c Config) NICKeys() []string {
	var out []string
	for i := range 32 {
		if _, ok := c["net"+strconv.Itoa(i)]; ok {
			out = append(out, "net"+strconv.Itoa(i))
		}
	}
	return out
}

// Tags are the VM's tags.
func (c Config) Tags() []string { return SplitTags(c["tags"]) }

// SplitTags splits PVE's tag list, which separates with ';' (or ',' and spaces).
func SplitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// JoinTags writes a tag list as PVE does, separated by ';'.
func JoinTags(tags []string) string { return strings.Join(tags, ";") }

// IsCDROM reports whether a drive is a CD-ROM or a cloud-init drive.
func IsCDROM(drive string) bool {
	p := ParseProperty(drive)
	return p.Opts["media"] == "cdrom" || p.First == "none" || p.First == "cdrom" || strings.Contains(p.First, "cloudinit")
}

// Property is a parsed PVE property string: a first value (a drive's volume, a NIC's
// model=MAC), then key=value options in their order.
type Property struct {
	// First is the first value: a drive's volume, a NIC's model=MAC.
	First string
	// Keys are the options' keys in their order.
	Keys []string
	// Opts are the options by key.
	Opts map[string]string
}

// ParseProperty parses a property string such as
// "local-lvm:vm-101-disk-0,iothread=1,size=10G".
func ParseProperty(s string) Property {
	p := Property{Opts: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if i == 0 && (!ok || k == "file" || isNICModel(k)) {
			p.First = part
			if k == "file" {
				p.First = v
			}
			continue
		}
		if ok {
			p.Set(k, v)
		}
	}
	return p
}

// Set sets an option, keeping the options' order.
func (p *Property) Set(k, v string) {
	if _, ok := p.Opts[k]; !ok {
		p.Keys = append(p.Keys, k)
	}
	p.Opts[k] = v
}

// String prints the property string.
func (p Property) String() string {
	parts := make([]string, 0, 1+len(p.Keys))
	parts = append(parts, p.First)
	for _, k := range p.Keys {
		parts = append(parts, k+"="+p.Opts[k])
	}
	return strings.Join(parts, ",")
}

// isNICModel reports whether k is a NIC model, which carries the MAC as its value.
func isNICModel(k string) bool {
	return slices.Contains([]string{"virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"}, k)
}

// DiskGiB is a drive's size in GiB, rounded up; 0 when unknown.
func DiskGiB(drive string) int64 {
	size := ParseProperty(drive).Opts["size"]
	if size == "" {
		return 0
	}
	unit := size[len(size)-1]
	n, err := strconv.ParseFloat(strings.TrimRight(size, "KMGT"), 64)
	if err != nil {
		return 0
	}
	shift := map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[unit]
	if shift == 0 {
		shift = 1
	}
	bytes := n * shift
	return int64((bytes + (1<<30 - 1)) / (1 << 30))
}

// StorageOf is the storage of a drive's volume.
func StorageOf(drive string) string {
	sid, _, _ := strings.Cut(ParseProperty(drive).First, ":")
	return sid
}
