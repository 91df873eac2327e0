package vsphere

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Guest info keys that cloud-init's VMware datasource reads.
const (
	guestinfoUserData         = "guestinfo.userdata"
	guestinfoUserDataEncoding = "guestinfo.userdata.encoding"
	guestinfoMetadata         = "guestinfo.metadata"
	guestinfoMetadataEncoding = "guestinfo.metadata.encoding"
)

// placement is where a machine's VM goes.
type placement struct {
	fd     *failureDomain
	folder types.ManagedObjectReference
	pool   types.ManagedObjectReference
	// datastore holds the VM's home and boot disk; nil leaves them with the template's.
	datastore *datastoreInfo
	linked    bool
}

// template is what a clone needs of its template.
type template struct {
	ref      types.ManagedObjectReference
	devices  object.VirtualDeviceList
	snapshot *types.ManagedObjectReference
}

// Create clones the machine's template into its failure domain, shaped by the machine's
// spec in one clone spec, and returns the clone task at once. It succeeds without a
// clone when the machine's VM exists.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
	vm, err := s.findVM(ctx, string(m.UID))
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	if vm != nil {
		return providersdk.CreateResult{}, s.checkIdentity(vm, m)
	}
	if err := checkUserDataSize(m); err != nil {
		return providersdk.CreateResult{}, err
	}
	opts := &infrav1.VSphereOptions{}
	if m.Object != nil {
		if err := m.SpecField("vsphere", opts); err != nil {
			return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineFailedReason, "%s", err.Error())
		}
	}
	pl, err := s.place(ctx, m, opts)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	// No name check first: vCenter refuses a duplicate name itself, and a search of the
	// folder before every clone costs a call per VM.
	name := vmName(m.Namespace, m.Name)
	tmpl, err := s.template(ctx, m)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	spec, err := s.cloneSpec(ctx, m, pl, tmpl)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	res, err := methods.CloneVM_Task(ctx, s.vim, &types.CloneVM_Task{This: tmpl.ref, Folder: pl.folder, Name: name, Spec: *spec})
	if err != nil {
		var dup *types.DuplicateName
		if _, ok := fault.As(err, &dup); ok {
			return providersdk.CreateResult{}, s.nameTaken(ctx, m, dup, &pl.folder)
		}
		return providersdk.CreateResult{}, s.fail("clone template "+tmpl.ref.Value, err)
	}
	return providersdk.CreateResult{Task: task(res.Returnval, providersdk.OperationClone)}, nil
}

// nameTaken decides what a VM that already has the machine's VM name in folder is: the
// machine's own (adopted: nil, the next look finds it by UUID), one a clone is still
// making, which after a restart may be the machine's own whose task was lost (waited
// for), or another's (NameConflict, left alone).
// The fault names the VM; where it does not, folder (when known) is searched for the name.
func (s *session) nameTaken(ctx context.Context, m *providersdk.Machine, dup *types.DuplicateName, folder *types.ManagedObjectReference) error {
	if vm, err := s.findVM(ctx, string(m.UID)); err != nil || vm != nil {
		return err
	}
	name := vmName(m.Namespace, m.Name)
	ref := dup.Object
	if ref.Value == "" && folder != nil {
		obj, err := object.NewSearchIndex(s.vim).FindChild(ctx, object.NewFolder(s.vim, *folder), name)
		if err != nil {
			return s.fail("look for VM "+name, err)
		}
		if obj == nil {
			return providersdk.InFlight(providersdk.OperationClone, "") // gone meanwhile: look again
		}
		ref = obj.Reference()
	}
	if ref.Value == "" {
		return nameConflict(m)
	}
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(s.vim).RetrieveOne(ctx, ref, []string{"config.instanceUuid"}, &vm); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return providersdk.InFlight(providersdk.OperationClone, "")
		}
		return s.fail("read VM "+name, err)
	}
	if vm.Config == nil || vm.Config.InstanceUuid == "" || vm.Config.InstanceUuid == string(m.UID) {
		return providersdk.InFlight(providersdk.OperationClone, "")
	}
	return nameConflict(m)
}

// nameConflict says that a VM that is not the machine's has its VM name.
func nameConflict(m *providersdk.Machine) error {
	return providersdk.Permanent(infrav1.MachineNameConflictReason,
		"a VM named %q already exists in the target folder and is not this machine's (it lacks instance UUID %s); rename or remove it",
		vmName(m.Namespace, m.Name), m.UID)
}

// place decides the failure domain, folder, resource pool and datastore of a new VM:
// the machine's spec.vsphere first, then the Provider's parameters, then the failure
// domain's defaults.
func (s *session) place(ctx context.Context, m *providersdk.Machine, opts *infrav1.VSphereOptions) (*placement, error) {
	fd, err := s.failureDomain(ctx, m.Spec.FailureDomain)
	if err != nil {
		return nil, err
	}
	if dc := opts.Datacenter; dc != "" && dc != fd.datacenterName && dc != fd.datacenterPath {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"spec.vsphere.datacenter %q is not the datacenter of failure domain %q (%s)", dc, fd.name, fd.datacenterPath)
	}
	pl := &placement{fd: fd, folder: fd.vmFolder, pool: fd.resourcePool, linked: opts.CloneMode == "linked"}
	if f := first(opts.Folder, s.params.folder); f != "" {
		if pl.folder, err = s.findPath(ctx, fd.datacenterPath+"/vm", f, "folder", "Folder"); err != nil {
			return nil, err
		}
	}
	if rp := first(opts.ResourcePool, s.params.resourcePool); rp != "" {
		if pl.pool, err = s.findPath(ctx, fd.clusterPath+"/Resources", rp, "resource pool", "ResourcePool", "VirtualApp"); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Datastore != "":
		pl.datastore, err = fd.datastore(opts.Datastore)
	case len(m.Spec.Disks) > 0 && hasStorageKey(m.Spec.Disks[0].Target):
		pl.datastore, err = fd.diskDatastore(m.Spec.Disks[0])
	case s.params.datastore != "":
		pl.datastore, err = fd.datastore(s.params.datastore)
	}
	return pl, err
}

// failureDomain finds a failure domain by name, discovering the inventory again when it
// is not known. An empty name is the only failure domain, when there is one.
func (s *session) failureDomain(ctx context.Context, name string) (*failureDomain, error) {
	for _, refresh := range []bool{false, true} {
		inv, err := s.domains(ctx, refresh)
		if err != nil {
			return nil, err
		}
		if name == "" && len(inv.domains) == 1 {
			return inv.domains[0], nil
		}
		if fd := inv.byName[name]; fd != nil {
			return fd, nil
		}
	}
	if name == "" {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"spec.failureDomain is empty and vCenter %s does not have exactly one failure domain", s.host)
	}
	return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "failure domain %q does not exist on vCenter %s", name, s.host)
}

// findPath finds an object by inventory path; a relative path is taken from base.
func (s *session) findPath(ctx context.Context, base, path, what string, kinds ...string) (types.ManagedObjectReference, error) {
	full := path
	if !strings.HasPrefix(path, "/") {
		full = base + "/" + path
	}
	obj, err := object.NewSearchIndex(s.vim).FindByInventoryPath(ctx, full)
	if err != nil {
		return types.ManagedObjectReference{}, s.fail("find "+what+" "+full, err)
	}
	if obj == nil {
		return types.ManagedObjectReference{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "%s %q does not exist on vCenter %s", what, full, s.host)
	}
	for _, k := range kinds {
		if obj.Reference().Type == k {
			return obj.Reference(), nil
		}
	}
	return types.ManagedObjectReference{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "%q is a %s, not a %s", full, obj.Reference().Type, what)
}

// datastore finds a datastore by name among those the failure domain reaches.
func (fd *failureDomain) datastore(name string) (*datastoreInfo, error) {
	ds, ok := fd.datastores[name]
	if !ok {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"datastore %q is not reachable from failure domain %q", name, fd.name)
	}
	return &ds, nil
}

// diskDatastore finds the datastore of a disk's storage class target; nil when the
// target has no vSphere key.
func (fd *failureDomain) diskDatastore(d infrav1.MachineDisk) (*datastoreInfo, error) {
	ds, ok, what := fd.storageTarget(d.Target)
	if !ok {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"disk %q: %s of storage class %q is not reachable from failure domain %q", d.Name, what, d.StorageClass, fd.name)
	}
	if ds.ref.Value == "" {
		return nil, nil
	}
	return &ds, nil
}

// hasStorageKey reports whether a storage target names vSphere storage.
func hasStorageKey(target map[string]string) bool {
	_, ds := target[targetDatastore]
	_, pod := target[targetDatastoreCluster]
	return ds || pod
}

// template reads the machine's template: its resolved ID, or its name.
func (s *session) template(ctx context.Context, m *providersdk.Machine) (*template, error) {
	img := m.Spec.Image
	ref := types.ManagedObjectReference{Type: "VirtualMachine", Value: img.ResolvedRef}
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
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(s.vim).RetrieveOne(ctx, ref, []string{"config.hardware.device", "snapshot"}, &vm); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return nil, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "template %s (%q) not found in vCenter %s", ref.Value, img.Ref, s.host)
		}
		return nil, s.fail("read template "+ref.Value, err)
	}
	t := &template{ref: ref}
	if vm.Config != nil {
		t.devices = vm.Config.Hardware.Device
	}
	if vm.Snapshot != nil {
		t.snapshot = vm.Snapshot.CurrentSnapshot
	}
	return t, nil
}

// cloneSpec shapes the clone in one spec: CPUs, memory, firmware, disks, NICs, guest
// info, identity and power.
func (s *session) cloneSpec(ctx context.Context, m *providersdk.Machine, pl *placement, t *template) (*types.VirtualMachineCloneSpec, error) {
	want := desiredPower(m)
	cfg := &types.VirtualMachineConfigSpec{
		NumCPUs:      m.Spec.Hardware.CPUs,
		MemoryMB:     m.Spec.Hardware.MemoryMiB,
		InstanceUuid: string(m.UID),
		ExtraConfig:  extraConfig(m),
	}
	switch m.Spec.Hardware.Firmware {
	case banlieuev1.FirmwareBIOS:
		cfg.Firmware = string(types.GuestOsDescriptorFirmwareTypeBios)
	case banlieuev1.FirmwareEFI, banlieuev1.FirmwareEFISecure:
		cfg.Firmware = string(types.GuestOsDescriptorFirmwareTypeEfi)
		cfg.BootOptions = &types.VirtualMachineBootOptions{
			EfiSecureBootEnabled: types.NewBool(m.Spec.Hardware.Firmware == banlieuev1.FirmwareEFISecure),
		}
	}
	spec := &types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pl.pool, Folder: &pl.folder},
		PowerOn:  want == banlieuev1.PowerStatePoweredOn || want == banlieuev1.PowerStateSuspended,
		Config:   cfg,
	}
	if pl.datastore != nil {
		spec.Location.Datastore = &pl.datastore.ref
	}
	if pl.linked {
		if t.snapshot == nil {
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"a linked clone needs a snapshot on template %s; take one or use cloneMode full", t.ref.Value)
		}
		spec.Snapshot = t.snapshot
		spec.Location.DiskMoveType = string(types.VirtualMachineRelocateDiskMoveOptionsCreateNewChildDiskBacking)
	}

	keys := &keySource{next: -200}
	changes, locators, err := s.diskChanges(m, t.devices, pl, keys, true)
	if err != nil {
		return nil, err
	}
	nicChanges, err := s.nicChanges(ctx, m, t.devices, pl.fd, keys)
	if err != nil {
		return nil, err
	}
	cfg.DeviceChange = append(changes, nicChanges...)
	if !pl.linked {
		spec.Location.Disk = locators
	}
	return spec, nil
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
func extraConfig(m *providersdk.Machine) []types.BaseOptionValue {
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", m.UID, yamlString(hostname(m.Name)))
	opts := []types.BaseOptionValue{
		&types.OptionValue{Key: ExtraConfigMachineUID, Value: string(m.UID)},
		&types.OptionValue{Key: guestinfoMetadata, Value: base64.StdEncoding.EncodeToString([]byte(meta))},
		&types.OptionValue{Key: guestinfoMetadataEncoding, Value: "base64"},
	}
	if m.UserData != nil {
		opts = append(opts,
			&types.OptionValue{Key: guestinfoUserData, Value: base64.StdEncoding.EncodeToString(m.UserData)},
			&types.OptionValue{Key: guestinfoUserDataEncoding, Value: "base64"},
		)
	}
	return opts
}

// nicChanges re-backs the template's NICs onto the interfaces' networks, adds vmxnet3
// NICs for the rest and removes the template's extra NICs. A machine without interfaces
// keeps the template's NICs.
func (s *session) nicChanges(ctx context.Context, m *providersdk.Machine, devices object.VirtualDeviceList, fd *failureDomain, keys *keySource) ([]types.BaseVirtualDeviceConfigSpec, error) {
	if len(m.Spec.Interfaces) == 0 {
		return nil, nil
	}
	existing := nics(devices)
	var changes []types.BaseVirtualDeviceConfigSpec
	for i, iface := range m.Spec.Interfaces {
		name, ok := iface.Target[targetNetwork]
		if !ok {
			if i < len(existing) {
				continue // keep the template's network
			}
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network class %q names no network and the template has no NIC %d to keep", iface.Name, iface.NetworkClass, i)
		}
		ref, ok := fd.networks[name]
		if !ok {
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"interface %q: network %q of network class %q is not in failure domain %q", iface.Name, name, iface.NetworkClass, fd.name)
		}
		netRef, ok := object.NewReference(s.vim, ref).(object.NetworkReference)
		if !ok {
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "interface %q: %q is not a network", iface.Name, name)
		}
		backing, err := netRef.EthernetCardBackingInfo(ctx)
		if err != nil {
			return nil, s.fail("read network "+name, err)
		}
		if i < len(existing) {
			card := existing[i].(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
			card.Backing = backing
			card.Connectable = &types.VirtualDeviceConnectInfo{StartConnected: true, AllowGuestControl: true, Connected: true}
			changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: existing[i]})
			continue
		}
		dev, err := object.EthernetCardTypes().CreateEthernetCard("vmxnet3", backing)
		if err != nil {
			return nil, fmt.Errorf("failed to create NIC for interface %s: %w", iface.Name, err)
		}
		card := dev.(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
		card.Key = keys.take()
		card.Connectable = &types.VirtualDeviceConnectInfo{StartConnected: true, AllowGuestControl: true, Connected: true}
		changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: dev})
	}
	for _, extra := range existing[min(len(m.Spec.Interfaces), len(existing)):] {
		changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: extra})
	}
	return changes, nil
}

// keySource hands out the negative keys of devices a spec adds.
type keySource struct{ next int32 }

func (k *keySource) take() int32 {
	k.next--
	return k.next
}

// first returns the first non-empty string.
func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
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
