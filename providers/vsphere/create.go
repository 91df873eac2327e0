package vsphere

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// Guest info keys that cloud-init's VMware datasource reads.
const (
	guestinfoUserData         = "guestinfo.userdata"
	guestinfoUserDataEncoding = "guestinfo.userdata.encoding"
	guestinfoMetadata         = "guestinfo.metadata"
	guestinfoMetadataEncoding = "guestinfo.metadata.encoding"
)

// Create clones the machine's template into its failure domain, shaped by the machine's
// spec in one clone request, and returns the clone task at once. obs is Observe's: it
// found no VM, so none is looked for again; should one have appeared since (another
// provider process's clone), vCenter refuses the duplicate name and the VM is adopted
// when it is the machine's. An observation that found the VM makes no clone.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
	if obs.Exists {
		return providersdk.CreateResult{}, nil
	}
	if err := checkUserDataSize(m); err != nil {
		return providersdk.CreateResult{}, err
	}
	opts := &infrav1.VSphereOptions{}
	if err := m.Options("vsphere", opts); err != nil {
		return providersdk.CreateResult{}, err
	}
	pl, err := s.place(ctx, m, opts)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	tmpl, err := s.template(ctx, m)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	// No name check first: vCenter refuses a duplicate name itself, and a search of the
	// folder before every clone costs a call per VM.
	req, err := cloneRequest(m, pl, tmpl)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	// The Provider's hotplug parameter: the headroom to grow while the VM runs.
	req.CPUHotAdd, req.MemoryHotAdd = s.params.hotplug.CPU, s.params.hotplug.Memory
	ref, err := s.vc.Clone(ctx, req)
	if err != nil {
		if obj, ok := vcenter.AsDuplicateName(err); ok {
			return providersdk.CreateResult{}, s.nameTaken(ctx, m, obj, &pl.folder)
		}
		return providersdk.CreateResult{}, err
	}
	return providersdk.CreateResult{Task: task(ref, providersdk.OperationClone)}, nil
}

// template reads the machine's template: its resolved ID, or its name.
func (s *session) template(ctx context.Context, m *providersdk.Machine) (*vcenter.Template, error) {
	img := m.Spec.Image
	ref := vcenter.Ref{Type: "VirtualMachine", Value: img.ResolvedRef}
	if img.ResolvedRef == "" {
		found, ok, err := s.findTemplate(ctx, img.Ref)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "template %q not found in vCenter %s", img.Ref, s.host)
		}
		ref = found
	}
	t, err := s.vc.ReadTemplate(ctx, ref)
	if vcenter.IsNotFound(err) {
		return nil, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "template %s (%q) not found in vCenter %s", ref.Value, img.Ref, s.host)
	}
	return t, err
}

// cloneRequest shapes the clone from the machine's spec: placement, CPUs, memory,
// firmware, disks, NICs, guest info, identity and power.
func cloneRequest(m *providersdk.Machine, pl *placement, t *vcenter.Template) (vcenter.CloneRequest, error) {
	want := m.DesiredPower()
	req := vcenter.CloneRequest{
		Template:     t,
		Name:         vmName(m.Namespace, m.Name),
		Folder:       pl.folder,
		Pool:         pl.pool,
		Host:         pl.host,
		Datastore:    pl.datastore,
		Linked:       pl.linked,
		InstanceUUID: string(m.UID),
		CPUs:         m.Spec.Hardware.CPUs,
		MemoryMiB:    m.Spec.Hardware.MemoryMiB,
		ExtraConfig:  extraConfig(m),
		PowerOn:      want == banlieuev1.PowerStatePoweredOn || want == banlieuev1.PowerStateSuspended,
	}
	switch m.Spec.Hardware.Firmware {
	case banlieuev1.FirmwareBIOS:
		req.Firmware = vcenter.FirmwareBIOS
	case banlieuev1.FirmwareEFI, banlieuev1.FirmwareEFISecure:
		req.Firmware = vcenter.FirmwareEFI
		req.SecureBoot = m.Spec.Hardware.Firmware == banlieuev1.FirmwareEFISecure
	}
	if pl.linked && !t.HasSnapshot {
		return vcenter.CloneRequest{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"a linked clone needs a snapshot on template %s; take one or use cloneMode full", t.Ref.Value)
	}
	var err error
	if req.Disks, err = cloneDisks(m, pl, t); err != nil {
		return vcenter.CloneRequest{}, err
	}
	if req.NICs, err = cloneNICs(m, pl.fd, t); err != nil {
		return vcenter.CloneRequest{}, err
	}
	return req, nil
}

// cloneDisks are the clone's disks: the template's grown to the spec's sizes, then the
// spec's others. A template disk larger than the spec's cannot shrink, and a linked
// clone cannot grow one.
func cloneDisks(m *providersdk.Machine, pl *placement, t *vcenter.Template) ([]vcenter.Disk, error) {
	out := make([]vcenter.Disk, 0, len(m.Spec.Disks))
	for i, d := range m.Spec.Disks {
		disk, err := pl.disk(d)
		if err != nil {
			return nil, err
		}
		if i < len(t.DiskBytes) {
			want, have := disk.Bytes, t.DiskBytes[i]
			if want < have {
				return nil, providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
					"the template's disk %d is %s, larger than the %s disk %q asks for; vSphere disks cannot shrink",
					i, providersdk.GiBString(have), providersdk.GiBString(want), d.Name)
			}
			if want > have && pl.linked {
				return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
					"a linked clone cannot grow disk %q from %s to %s; use cloneMode full", d.Name, providersdk.GiBString(have), providersdk.GiBString(want))
			}
		}
		out = append(out, disk)
	}
	return out, nil
}

// cloneNICs put the template's NICs on the interfaces' networks and add NICs for the
// rest; an interface whose network class names no network keeps the template's NIC at
// its position. A machine without interfaces keeps the template's NICs.
func cloneNICs(m *providersdk.Machine, fd *failureDomain, t *vcenter.Template) ([]vcenter.NIC, error) {
	var out []vcenter.NIC
	for i, iface := range m.Spec.Interfaces {
		name, ok := iface.Target[targetNetwork]
		if !ok {
			if i < t.NICs {
				out = append(out, vcenter.NIC{Interface: iface.Name}) // keep the template's network
				continue
			}
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network class %q names no network and the template has no NIC %d to keep", iface.Name, iface.NetworkClass, i)
		}
		ref, ok := fd.networks[name]
		if !ok {
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network %q of network class %q is not in failure domain %q", iface.Name, name, iface.NetworkClass, fd.name)
		}
		out = append(out, vcenter.NIC{Interface: iface.Name, Network: ref, NetworkName: name})
	}
	return out, nil
}

// maxGuestInfoUserData is the most user data Create puts into guestinfo.userdata, before
// its base64 encoding makes it a third larger. Guest info is kept in the VM's .vmx
// file, which vSphere keeps under 1 MiB (tools.setInfo.sizeLimit); the encoded user
// data may take three quarters of that, the rest of the VM's configuration the rest.
const maxGuestInfoUserData = (1 << 20) * 3 / 4 * 3 / 4

// checkUserDataSize refuses user data that guestinfo cannot hold, before a clone would
// fail on it or, worse, hand the guest a configuration vSphere cut.
func checkUserDataSize(m *providersdk.Machine) error {
	if len(m.UserData) <= maxGuestInfoUserData {
		return nil
	}
	ref := "spec.userData"
	if ud := m.Spec.UserData; ud != nil {
		ref = fmt.Sprintf("key %q of Secret %s/%s", cmp.Or(ud.Key, "user-data"), m.Namespace, ud.SecretRef.Name)
	}
	return providersdk.Permanent(infrav1.MachineUserDataTooLargeReason,
		"the user data in %s is %d bytes; vSphere hands it to the guest base64-encoded in guestinfo.userdata, "+
			"in the VM's .vmx file, which holds at most %d bytes of it (576 KiB); make it smaller: gzip it "+
			"(cloud-init reads gzip-compressed user data) or have it #include the rest from a URL",
		ref, len(m.UserData), maxGuestInfoUserData)
}

// extraConfig is the guest info and identity of a new VM.
func extraConfig(m *providersdk.Machine) []vcenter.Option {
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", m.UID, yamlString(hostname(m.Name)))
	var opts []vcenter.Option
	values := mark(m)
	for _, k := range slices.Sorted(maps.Keys(values)) {
		opts = append(opts, vcenter.Option{Key: k, Value: values[k]})
	}
	opts = append(opts,
		vcenter.Option{Key: guestinfoMetadata, Value: base64.StdEncoding.EncodeToString([]byte(meta))},
		vcenter.Option{Key: guestinfoMetadataEncoding, Value: "base64"},
	)
	if m.UserData != nil {
		opts = append(opts,
			vcenter.Option{Key: guestinfoUserData, Value: base64.StdEncoding.EncodeToString(m.UserData)},
			vcenter.Option{Key: guestinfoUserDataEncoding, Value: "base64"},
		)
	}
	return opts
}

// hostname is the guest's host name for a machine name: the name itself while each of
// its dot-separated labels fits in a DNS label's 63 characters, which is what a guest
// can take (cloud-init sets the first label as the host name, the whole as the FQDN);
// else the name made one DNS label of 63 characters.
func hostname(name string) string {
	for _, label := range strings.Split(name, ".") {
		if len(label) > 63 {
			return providersdk.DNSLabel(strings.ReplaceAll(name, ".", "-"), "localhost")
		}
	}
	return name
}

// yamlPlain matches the host names that YAML 1.1, as cloud-init reads meta-data, takes
// as a string when written plain: those that start with a letter and are no boolean or
// null word.
var yamlPlain = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)

// yamlString writes s as a YAML string: plain when YAML reads it back as the same string,
// else double-quoted, so that a machine named 0777 or yes gets that host name and not the
// number 511 or true.
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no", "true", "false", "on", "off", "null":
	default:
		if yamlPlain.MatchString(s) {
			return s
		}
	}
	return strconv.Quote(s)
}
