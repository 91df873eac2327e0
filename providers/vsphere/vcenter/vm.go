package vcenter

import (
	"cmp"
	"context"
	"sort"
	"strings"
	"time"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// PowerState is a VM's power state as vSphere names it.
type PowerState string

// vSphere's power states.
const (
	// PoweredOn is a running VM.
	PoweredOn PowerState = PowerState(types.VirtualMachinePowerStatePoweredOn)
	// PoweredOff is a stopped VM.
	PoweredOff PowerState = PowerState(types.VirtualMachinePowerStatePoweredOff)
	// Suspended is a suspended VM.
	Suspended PowerState = PowerState(types.VirtualMachinePowerStateSuspended)
)

// VM is what one read of a VM's properties found.
type VM struct {
	// Ref is the VM's managed object reference.
	Ref Ref
	// Name is the VM's name.
	Name string
	// UUID is config.uuid, the BIOS UUID.
	UUID string
	// InstanceUUID is config.instanceUuid.
	InstanceUUID string
	// Identity is the value of the Client's IdentityKey in the VM's extraConfig; "" when
	// the key is not set.
	Identity string
	// Marks are the values of the Client's MarkKeys in the VM's extraConfig, as MarkedVMs
	// reads them; a key that is not set is left out.
	Marks map[string]string
	// Template is true for a template.
	Template bool
	// ChangeVersion is config.changeVersion, which changes with every change of the
	// VM's configuration: a reconfiguration that names it is refused (ConcurrentAccess)
	// when the VM changed since it was read.
	ChangeVersion string
	// CPUs and MemoryMiB are the VM's virtual CPU count and memory.
	CPUs      int32
	MemoryMiB int64
	// DiskBytes are the sizes of the VM's disks in bus order: by controller, then unit.
	DiskBytes []int64
	// CPUHotAdd and MemoryHotAdd say whether CPUs and memory may be added while it runs.
	CPUHotAdd, MemoryHotAdd bool
	// Power is the VM's power state.
	Power PowerState
	// BootTime is when the VM was last powered on (summary.runtime.bootTime, the same
	// value as runtime.bootTime); zero while it is not running, or when vCenter did not
	// say.
	BootTime time.Time
	// Host is the host the VM runs on; zero when it has none.
	Host Ref
	// ToolsRunning is true while VMware Tools run in the guest.
	ToolsRunning bool
	// GuestIP is the guest's primary address (guest.ipAddress), as VMware Tools report it.
	GuestIP string
	// GuestNICs are the addresses of each of the guest's NICs (guest.net).
	GuestNICs [][]string

	// devices are the VM's virtual devices, for the device changes of a reconfiguration.
	devices object.VirtualDeviceList
}

// vmProperties are the VM properties a VM read asks for, in one call, besides the
// identity key.
var vmProperties = []string{
	"name",
	"config.uuid",
	"config.instanceUuid",
	"config.template",
	"config.changeVersion",
	"config.hardware.numCPU",
	"config.hardware.memoryMB",
	"config.hardware.device",
	"config.cpuHotAddEnabled",
	"config.memoryHotAddEnabled",
	"runtime.powerState",
	"runtime.host",
	// summary.runtime is runtime; vcsim keeps the boot time there only.
	"summary.runtime.bootTime",
	"guest.toolsRunningStatus",
	"guest.ipAddress",
	"guest.net",
}

// identityProperty reads the one extraConfig key that holds the VM's identity.
func (c *Client) identityProperty() string { return extraConfigProperty(c.identityKey) }

// extraConfigProperty is the keyed property path of extraConfig key.
func extraConfigProperty(key string) string { return `config.extraConfig["` + key + `"]` }

// readOption records the value of a keyed extraConfig property, path, in vm.
func (c *Client) readOption(vm *VM, path string, o *types.OptionValue) {
	val, _ := o.Value.(string)
	key := cmp.Or(o.Key, strings.TrimSuffix(strings.TrimPrefix(path, `config.extraConfig["`), `"]`))
	if key == c.identityKey || val == "" {
		if key == c.identityKey {
			vm.Identity = val
		}
		return
	}
	if vm.Marks == nil {
		vm.Marks = map[string]string{}
	}
	vm.Marks[key] = val
}

// FindVM finds the VM whose instance UUID is uuid with the SearchIndex, and reads it. It
// returns ErrNotFound when there is none.
func (c *Client) FindVM(ctx context.Context, uuid string) (*VM, error) {
	res, err := methods.FindByUuid(ctx, c.vim, &types.FindByUuid{
		This:         *c.vim.ServiceContent.SearchIndex,
		Uuid:         uuid,
		VmSearch:     true,
		InstanceUuid: types.NewBool(true),
	})
	if err != nil {
		return nil, c.fail("find VM by instance UUID", err)
	}
	if res.Returnval == nil {
		return nil, notFound("VM with instance UUID " + uuid)
	}
	return c.ReadVM(ctx, refOf(*res.Returnval))
}

// FindVMsByBIOSUUID finds the VMs and templates whose BIOS UUID (config.uuid) is uuid
// with the SearchIndex, in every datacenter: vSphere does not keep BIOS UUIDs unique, so
// there may be several, or none.
func (c *Client) FindVMsByBIOSUUID(ctx context.Context, uuid string) ([]Ref, error) {
	res, err := methods.FindAllByUuid(ctx, c.vim, &types.FindAllByUuid{
		This:         *c.vim.ServiceContent.SearchIndex,
		Uuid:         uuid,
		VmSearch:     true,
		InstanceUuid: types.NewBool(false),
	})
	if err != nil {
		return nil, c.fail("find VMs by BIOS UUID", err)
	}
	out := make([]Ref, 0, len(res.Returnval))
	for _, r := range res.Returnval {
		out = append(out, refOf(r))
	}
	return out, nil
}

// ReadVM reads a VM's properties in one property collector call. It returns ErrNotFound
// when the VM no longer exists.
func (c *Client) ReadVM(ctx context.Context, ref Ref) (*VM, error) {
	objs, err := c.retrieveVMs(ctx, []Ref{ref}, c.vmProperties, "VM "+ref.Value, "read VM "+ref.Value)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, notFound("VM " + ref.Value)
	}
	vm := c.vmOf(objs[0].Obj, objs[0].PropSet)
	for _, missing := range objs[0].MissingSet {
		if missing.Path == c.identityProperty() {
			// A vCenter that does not take keyed paths: read the whole extraConfig.
			if vm.Identity, err = c.readIdentity(ctx, ref); err != nil {
				return nil, err
			}
		}
	}
	return vm, nil
}

// Identity reads the Client's IdentityKey in the VM's extraConfig alone, afresh: ""
// when the key is not set. It returns ErrNotFound when the VM no longer exists.
func (c *Client) Identity(ctx context.Context, ref Ref) (string, error) {
	objs, err := c.retrieveVMs(ctx, []Ref{ref}, []string{c.identityProperty()}, "VM "+ref.Value, "read the identity of VM "+ref.Value)
	if err != nil {
		return "", err
	}
	if len(objs) == 0 {
		return "", notFound("VM " + ref.Value)
	}
	for _, missing := range objs[0].MissingSet {
		if missing.Path == c.identityProperty() {
			return c.readIdentity(ctx, ref)
		}
	}
	return c.vmOf(objs[0].Obj, objs[0].PropSet).Identity, nil
}

// retrieveVMs reads properties of the VMs refs in one property collector call. vCenter
// refuses the whole call when one of them no longer exists: the error is then
// ErrNotFound for missing. Any other failure says it failed to what.
func (c *Client) retrieveVMs(ctx context.Context, refs []Ref, properties []string, missing, what string) ([]types.ObjectContent, error) {
	spec := types.PropertyFilterSpec{PropSet: []types.PropertySpec{{Type: "VirtualMachine", PathSet: properties}}}
	for _, r := range refs {
		spec.ObjectSet = append(spec.ObjectSet, types.ObjectSpec{Obj: r.ref()})
	}
	res, err := property.DefaultCollector(c.vim).RetrieveProperties(ctx, types.RetrieveProperties{SpecSet: []types.PropertyFilterSpec{spec}})
	if fault.Is(err, &types.ManagedObjectNotFound{}) {
		return nil, notFound(missing)
	}
	if err != nil {
		return nil, c.fail(what, err)
	}
	return res.Returnval, nil
}

// readIdentity reads the identity key from the VM's whole extraConfig.
func (c *Client) readIdentity(ctx context.Context, ref Ref) (string, error) {
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(c.vim).RetrieveOne(ctx, ref.ref(), []string{"config.extraConfig"}, &vm); err != nil {
		return "", c.fail("read the extraConfig of VM "+ref.Value, err)
	}
	if vm.Config == nil {
		return "", nil
	}
	for _, o := range vm.Config.ExtraConfig {
		if v := o.GetOptionValue(); v.Key == c.identityKey {
			id, _ := v.Value.(string)
			return id, nil
		}
	}
	return "", nil
}

// InstanceUUID reads a VM's instance UUID alone: "" while a clone is still making it.
// It returns ErrNotFound when the VM no longer exists.
func (c *Client) InstanceUUID(ctx context.Context, ref Ref) (string, error) {
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(c.vim).RetrieveOne(ctx, ref.ref(), []string{"config.instanceUuid"}, &vm); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return "", notFound("VM " + ref.Value)
		}
		return "", c.fail("read VM "+ref.Value, err)
	}
	if vm.Config == nil {
		return "", nil
	}
	return vm.Config.InstanceUuid, nil
}

// vmOf reads the VM ref's properties, as the property collector returned them, into a
// VM; the properties not given stay zero. A keyed extraConfig property is the identity
// when its key is the Client's IdentityKey, and a mark otherwise.
func (c *Client) vmOf(ref types.ManagedObjectReference, props []types.DynamicProperty) *VM {
	vm := &VM{Ref: refOf(ref)}
	for _, p := range props {
		switch v := p.Val.(type) {
		case string:
			switch p.Name {
			case "name":
				vm.Name = v
			case "config.uuid":
				vm.UUID = v
			case "config.instanceUuid":
				vm.InstanceUUID = v
			case "config.changeVersion":
				vm.ChangeVersion = v
			case "guest.toolsRunningStatus":
				vm.ToolsRunning = v == string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)
			case "guest.ipAddress":
				vm.GuestIP = v
			}
		case bool:
			switch p.Name {
			case "config.template":
				vm.Template = v
			case "config.cpuHotAddEnabled":
				vm.CPUHotAdd = v
			case "config.memoryHotAddEnabled":
				vm.MemoryHotAdd = v
			}
		case int32:
			switch p.Name {
			case "config.hardware.numCPU":
				vm.CPUs = v
			case "config.hardware.memoryMB":
				vm.MemoryMiB = int64(v)
			}
		case types.OptionValue: // a keyed property decodes as a value
			c.readOption(vm, p.Name, &v)
		case types.BaseOptionValue:
			c.readOption(vm, p.Name, v.GetOptionValue())
		case types.ArrayOfVirtualDevice:
			vm.devices = v.VirtualDevice
			for _, d := range disks(vm.devices) {
				vm.DiskBytes = append(vm.DiskBytes, diskBytes(d))
			}
		case time.Time:
			if p.Name == "summary.runtime.bootTime" {
				vm.BootTime = v
			}
		case *time.Time:
			if p.Name == "summary.runtime.bootTime" && v != nil {
				vm.BootTime = *v
			}
		case types.VirtualMachinePowerState:
			vm.Power = PowerState(v)
		case types.ManagedObjectReference:
			vm.Host = refOf(v)
		case types.ArrayOfGuestNicInfo:
			for _, n := range v.GuestNicInfo {
				vm.GuestNICs = append(vm.GuestNICs, n.IpAddress)
			}
		}
	}
	return vm
}

// disks returns the disks of devices in bus order: by controller, then unit number.
func disks(devices object.VirtualDeviceList) []*types.VirtualDisk {
	var out []*types.VirtualDisk
	for _, d := range devices {
		if disk, ok := d.(*types.VirtualDisk); ok {
			out = append(out, disk)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].VirtualDevice, out[j].VirtualDevice
		if a.ControllerKey != b.ControllerKey {
			return a.ControllerKey < b.ControllerKey
		}
		return unit(a) < unit(b)
	})
	return out
}

// nics returns the network cards of devices in device-key order, which is the order
// they were added in.
func nics(devices object.VirtualDeviceList) []types.BaseVirtualDevice {
	var out []types.BaseVirtualDevice
	for _, d := range devices {
		if _, ok := d.(types.BaseVirtualEthernetCard); ok {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].GetVirtualDevice().Key < out[j].GetVirtualDevice().Key
	})
	return out
}

// unit is a device's unit number, or -1.
func unit(d types.VirtualDevice) int32 {
	if d.UnitNumber == nil {
		return -1
	}
	return *d.UnitNumber
}

// diskBytes is a disk's capacity in bytes.
func diskBytes(d *types.VirtualDisk) int64 {
	if d.CapacityInBytes > 0 {
		return d.CapacityInBytes
	}
	return d.CapacityInKB * 1024
}
