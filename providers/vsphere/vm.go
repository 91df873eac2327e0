package vsphere

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// ExtraConfigMachineUID is the extraConfig key that holds the machine's UID on its VM,
// next to the instance UUID, so a lookup can check that a VM is really the machine's.
const ExtraConfigMachineUID = "banlieue.machine.uid"

// maxVMName is the longest VM name vSphere accepts.
const maxVMName = 80

// gib is a GiB in bytes.
const gib = int64(1) << 30

// vmProperties are the VM properties Observe, Update and Delete read, in one call.
// The keyed extraConfig path reads one key rather than the whole extraConfig, which holds
// the user data.
var vmProperties = []string{
	"name",
	"config.uuid",
	"config.instanceUuid",
	"config.template",
	machineUIDProperty,
	"config.hardware.numCPU",
	"config.hardware.memoryMB",
	"config.hardware.device",
	"config.cpuHotAddEnabled",
	"config.memoryHotAddEnabled",
	"runtime.powerState",
	"runtime.host",
	"guest.toolsRunningStatus",
	"guest.ipAddress",
	"guest.net",
}

// machineUIDProperty reads the one extraConfig key that holds the machine's UID.
const machineUIDProperty = `config.extraConfig["` + ExtraConfigMachineUID + `"]`

// readMachineUID reads the machine UID from the VM's whole extraConfig.
func (s *session) readMachineUID(ctx context.Context, ref types.ManagedObjectReference) (string, error) {
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(s.vim).RetrieveOne(ctx, ref, []string{"config.extraConfig"}, &vm); err != nil {
		return "", s.fail("read the extraConfig of VM "+ref.Value, err)
	}
	if vm.Config == nil {
		return "", nil
	}
	for _, o := range vm.Config.ExtraConfig {
		if v := o.GetOptionValue(); v.Key == ExtraConfigMachineUID {
			uid, _ := v.Value.(string)
			return uid, nil
		}
	}
	return "", nil
}

// vmState is what one read of a VM's properties found.
type vmState struct {
	ref          types.ManagedObjectReference
	name         string
	uuid         string
	instanceUUID string
	machineUID   string
	template     bool
	cpus         int32
	memoryMiB    int32
	devices      object.VirtualDeviceList
	cpuHotAdd    bool
	memoryHotAdd bool
	power        types.VirtualMachinePowerState
	host         types.ManagedObjectReference
	toolsRunning bool
	guestIP      string
	guestNet     []types.GuestNicInfo
}

// findVM finds the VM whose instance UUID is uid with the SearchIndex, and reads it. It
// returns nil when there is none.
func (s *session) findVM(ctx context.Context, uid string) (*vmState, error) {
	res, err := methods.FindByUuid(ctx, s.vim, &types.FindByUuid{
		This:         *s.vim.ServiceContent.SearchIndex,
		Uuid:         uid,
		VmSearch:     true,
		InstanceUuid: types.NewBool(true),
	})
	if err != nil {
		return nil, s.fail("find VM by instance UUID", err)
	}
	if res.Returnval == nil {
		return nil, nil
	}
	return s.readVM(ctx, *res.Returnval)
}

// readVM reads a VM's properties in one property collector call. It returns nil when
// the VM no longer exists.
func (s *session) readVM(ctx context.Context, ref types.ManagedObjectReference) (*vmState, error) {
	res, err := property.DefaultCollector(s.vim).RetrieveProperties(ctx, types.RetrieveProperties{
		SpecSet: []types.PropertyFilterSpec{{
			ObjectSet: []types.ObjectSpec{{Obj: ref}},
			PropSet:   []types.PropertySpec{{Type: "VirtualMachine", PathSet: vmProperties}},
		}},
	})
	if err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return nil, nil
		}
		return nil, s.fail("read VM "+ref.Value, err)
	}
	if len(res.Returnval) == 0 {
		return nil, nil
	}
	vm := vmStateOf(ref, res.Returnval[0].PropSet)
	for _, missing := range res.Returnval[0].MissingSet {
		if missing.Path == machineUIDProperty {
			// A vCenter that does not take keyed paths: read the whole extraConfig.
			if vm.machineUID, err = s.readMachineUID(ctx, ref); err != nil {
				return nil, err
			}
		}
	}
	return vm, nil
}

// vmStateOf reads the VM ref's properties, as the property collector returned them,
// into a vmState; the properties not given stay zero.
func vmStateOf(ref types.ManagedObjectReference, props []types.DynamicProperty) *vmState {
	vm := &vmState{ref: ref}
	for _, p := range props {
		switch v := p.Val.(type) {
		case string:
			switch p.Name {
			case "name":
				vm.name = v
			case "config.uuid":
				vm.uuid = v
			case "config.instanceUuid":
				vm.instanceUUID = v
			case "guest.toolsRunningStatus":
				vm.toolsRunning = v == string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)
			case "guest.ipAddress":
				vm.guestIP = v
			}
		case bool:
			switch p.Name {
			case "config.template":
				vm.template = v
			case "config.cpuHotAddEnabled":
				vm.cpuHotAdd = v
			case "config.memoryHotAddEnabled":
				vm.memoryHotAdd = v
			}
		case int32:
			switch p.Name {
			case "config.hardware.numCPU":
				vm.cpus = v
			case "config.hardware.memoryMB":
				vm.memoryMiB = v
			}
		case types.OptionValue: // a keyed property decodes as a value
			vm.machineUID, _ = v.Value.(string)
		case types.BaseOptionValue:
			vm.machineUID, _ = v.GetOptionValue().Value.(string)
		case types.ArrayOfVirtualDevice:
			vm.devices = v.VirtualDevice
		case types.VirtualMachinePowerState:
			vm.power = v
		case types.ManagedObjectReference:
			vm.host = v
		case types.ArrayOfGuestNicInfo:
			vm.guestNet = v.GuestNicInfo
		}
	}
	return vm
}

// vmName is the machine's VM name: "<namespace>-<name>", cut to vSphere's 80 characters
// with a hash of the whole name, so that two long names never get the same VM name.
func vmName(namespace, name string) string {
	full := namespace + "-" + name
	if len(full) <= maxVMName {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	return full[:maxVMName-9] + "-" + hex.EncodeToString(sum[:4])
}

// disks returns the VM's disks in bus order: by controller, then unit number.
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

// nics returns the VM's network cards in device-key order, which is the order they
// were added in.
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
