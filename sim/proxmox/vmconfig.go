package proxmoxsim

import (
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // PVE's config digest is SHA1
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// configKey matches the VM config keys the API accepts (PVE's json_config_properties,
// less the ones no client of banlieue's sets); others are rejected as PVE rejects
// them.
var configKey = regexp.MustCompile(`^(acpi|affinity|agent|amd-sev|arch|args|audio0|autostart|balloon|bios|boot|bootdisk|cdrom|cicustom|cipassword|citype|ciupgrade|ciuser|cores|cpu|cpulimit|cpuunits|description|efidisk0|freeze|hookscript|hotplug|hugepages|ivshmem|keephugepages|keyboard|kvm|localtime|machine|memory|meta|migrate_downtime|migrate_speed|name|nameserver|numa|onboot|ostype|protection|reboot|rng0|scsihw|searchdomain|shares|smbios1|smp|sockets|spice_enhancements|sshkeys|startdate|startup|tablet|tags|tdf|template|tpmstate0|vcpus|vga|vmgenid|vmstatestorage|watchdog|ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|net([0-9]|[12][0-9]|3[01])|ipconfig([0-9]|[12][0-9]|3[01])|unused[0-9]+|serial[0-3]|usb[0-9]+|hostpci[0-9]+|numa[0-9]+|parallel[0-2]|virtiofs[0-9]+)$`)

// driveKey matches the keys that hold disks and CD-ROM drives.
var driveKey = regexp.MustCompile(`^((ide|sata|scsi|virtio)[0-9]+|efidisk0|tpmstate0)$`)

// Config keys by JSON type in PVE's schema: the API answers booleans as 0/1 and
// integers as numbers; memory is a property string (PVE 8.1 on), so a string.
var (
	booleanKeys = []string{"acpi", "autostart", "ciupgrade", "freeze", "kvm", "localtime", "numa", "onboot", "protection", "reboot", "tablet", "template"}
	integerKeys = []string{"balloon", "cores", "cpuunits", "migrate_speed", "shares", "sockets", "vcpus"}
	numberKeys  = []string{"cpulimit", "migrate_downtime"}
)

// checkConfigParams rejects unknown keys and malformed booleans and numbers, and
// normalises booleans to 1/0 as PVE stores them.
func checkConfigParams(params map[string]string) error {
	errs := map[string]string{}
	for k, v := range params {
		switch {
		case !configKey.MatchString(k):
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		case slices.Contains(booleanKeys, k):
			b, ok := parseBool(v)
			if !ok {
				errs[k] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
			}
			params[k] = strconv.Itoa(boolInt(b))
		case slices.Contains(integerKeys, k):
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				errs[k] = fmt.Sprintf("type check ('integer') failed - got '%s'", v)
			case n < 1 && (k == "vcpus" || k == "cores" || k == "sockets"):
				errs[k] = "value must have a minimum value of 1"
			}
		case k == "hotplug":
			if msg := checkHotplug(v); msg != "" {
				errs[k] = msg
			}
		case slices.Contains(numberKeys, k):
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				errs[k] = fmt.Sprintf("type check ('number') failed - got '%s'", v)
			}
		}
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return true, true
	case "0", "off", "no", "false":
		return false, true
	}
	return false, false
}

// configJSON renders a config as GET .../config answers it, typed by the schema and
// with the digest of the config file.
func configJSON(conf map[string]string, digest string) map[string]any {
	out := make(map[string]any, len(conf)+1)
	for k, v := range conf {
		out[k] = typedValue(k, v)
	}
	out["digest"] = digest
	return out
}

func typedValue(k, v string) any {
	switch {
	case slices.Contains(booleanKeys, k), slices.Contains(integerKeys, k):
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	case slices.Contains(numberKeys, k):
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return v
}

// digest is the SHA1 of the VM's config file, its [PENDING] section included, which
// PVE hands out so that a client can refuse to overwrite someone else's change: a
// change that goes pending changes the digest as one that applies does.
func (v *vm) digest() string { return configDigest(v.conf, v.pending, v.pendingDelete) }

func configDigest(conf, pending map[string]string, pendingDelete []string) string {
	h := sha1.New() //nolint:gosec // PVE's config digest is SHA1
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		_, _ = fmt.Fprintf(h, "%s: %s\n", k, conf[k]) // a hash.Hash never fails to write
	}
	if len(pending) > 0 || len(pendingDelete) > 0 {
		_, _ = fmt.Fprint(h, "\n[PENDING]\n")
		for _, k := range slices.Sorted(maps.Keys(pending)) {
			_, _ = fmt.Fprintf(h, "%s: %s\n", k, pending[k])
		}
		if len(pendingDelete) > 0 {
			_, _ = fmt.Fprintf(h, "delete: %s\n", strings.Join(pendingDelete, ","))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// propertyString is a parsed PVE property string: a default value first (a drive's
// volume, a NIC's model=MAC), then key=value options.
type propertyString struct {
	first string
	opts  map[string]string
}

func parseProperty(s, defaultKey string) propertyString {
	p := propertyString{opts: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		switch {
		case i == 0 && (!ok || k == defaultKey):
			p.first = part
			if ok {
				p.first = v
			}
		case ok:
			p.opts[k] = v
		}
	}
	return p
}

// String prints the property string as PVE does: the default value, then the
// options in key order.
func (p propertyString) String() string {
	parts := make([]string, 0, 1+len(p.opts))
	parts = append(parts, p.first)
	for _, k := range slices.Sorted(maps.Keys(p.opts)) {
		parts = append(parts, k+"="+p.opts[k])
	}
	return strings.Join(parts, ",")
}

func (p propertyString) isCDROM() bool {
	return p.opts["media"] == "cdrom" || p.first == "cdrom" || p.first == "none"
}

var sizePattern = regexp.MustCompile(`^(\+)?(\d+(?:\.\d+)?)([KMGT])?$`)

// parseSize reads a PVE size (512, 4M, 10G, 1.5T); no unit means bytes.
func parseSize(s string) (uint64, bool) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil || m[1] != "" {
		return 0, false
	}
	return scaleSize(m[2], m[3]), true
}

func scaleSize(num, unit string) uint64 {
	f, _ := strconv.ParseFloat(num, 64)
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
	return uint64(f * float64(uint64(1)<<shift))
}

// formatSize prints a size as PVE's format_size does: the largest unit that divides
// it.
func formatSize(b uint64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatUint(b>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(b, 10)
}

// randomMAC is a locally administered address under Proxmox's OUI prefix BC:24:11,
// which PVE uses by default.
func randomMAC() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[0], b[1], b[2])
}

var netModels = []string{"e1000", "e1000e", "rtl8139", "virtio", "vmxnet3", "ne2k_pci", "pcnet", "i82551", "i82557b", "i82559er", "ne2k_isa"}

// parseNet splits a NIC into its model, its MAC and its other options; PVE accepts
// "virtio=BC:24:11:…", "virtio", "model=virtio,macaddr=…".
func parseNet(value string) (model, mac string, p propertyString) {
	p = parseProperty(value, "model")
	model, mac, _ = strings.Cut(p.first, "=")
	for _, m := range netModels {
		if v, ok := p.opts[m]; ok {
			model, mac = m, v
			delete(p.opts, m)
		}
	}
	if v, ok := p.opts["macaddr"]; ok {
		mac = v
		delete(p.opts, "macaddr")
	}
	return model, mac, p
}

// normalizeNet completes a NIC as PVE does: the model carries the MAC, made up when
// none is given.
func normalizeNet(key, value string) (string, error) {
	model, mac, p := parseNet(value)
	if !slices.Contains(netModels, model) {
		return "", paramErrorf(key, "invalid format - format error\n%s.model: property is missing and it is not optional", key)
	}
	if mac == "" {
		mac = randomMAC()
	}
	p.first = model + "=" + strings.ToUpper(mac)
	return p.String(), nil
}

// netMAC and netBridge read a NIC's MAC and bridge.
func netMAC(value string) string {
	_, mac, _ := parseNet(value)
	return mac
}

func netBridge(value string) string {
	_, _, p := parseNet(value)
	return p.opts["bridge"]
}

// netPattern matches the NIC keys, net0 to net31.
var netPattern = regexp.MustCompile(`^net[0-9]+$`)
