package vcenter

import (
	"context"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"
)

// Firmware is a VM's firmware as vSphere names it.
type Firmware string

// vSphere's firmware types.
const (
	// FirmwareBIOS is legacy BIOS.
	FirmwareBIOS Firmware = Firmware(types.GuestOsDescriptorFirmwareTypeBios)
	// FirmwareEFI is UEFI.
	FirmwareEFI Firmware = Firmware(types.GuestOsDescriptorFirmwareTypeEfi)
)

// Option is one extraConfig key and its value.
type Option struct {
	// Key is the extraConfig key, e.g. guestinfo.userdata.
	Key string
	// Value is its value.
	Value string
}

// CloneRequest is the whole shape of a clone, made in one CloneVM task.
type CloneRequest struct {
	// Template is the template to clone, as ReadTemplate read it.
	Template *Template
	// Name is the new VM's name.
	Name string
	// Folder and Pool are the VM folder and resource pool of the new VM.
	Folder, Pool Ref
	// Host is the host the new VM runs on; zero leaves it to vCenter, which may keep the
	// template's host even when Pool is in another cluster.
	Host Ref
	// Datastore holds the VM's home and, unless a disk says otherwise, its disks; nil
	// leaves them with the template's.
	Datastore *Datastore
	// Linked makes a linked clone from the template's current snapshot, whose disks
	// stay where the template's are.
	Linked bool
	// InstanceUUID is the new VM's instance UUID.
	InstanceUUID string
	// CPUs and MemoryMiB set the VM's virtual CPUs and memory; 0 keeps the template's.
	CPUs      int32
	MemoryMiB int64
	// Firmware sets the firmware, "" keeping the template's; SecureBoot turns UEFI
	// Secure Boot on with FirmwareEFI.
	Firmware   Firmware
	SecureBoot bool
	// Disks are the VM's disks in bus order: the template's first (grown where Bytes
	// is larger), then new ones.
	Disks []Disk
	// NICs are the VM's network cards in order: the template's first (moved to their
	// Network), then new vmxnet3 ones; the template's cards beyond them are removed.
	// None keeps the template's cards as they are.
	NICs []NIC
	// ExtraConfig are the new VM's extraConfig keys.
	ExtraConfig []Option
	// CPUHotAdd and MemoryHotAdd let the new VM's CPUs and memory grow while it runs.
	CPUHotAdd, MemoryHotAdd bool
	// PowerOn starts the VM once it is made.
	PowerOn bool
}

// Clone starts the clone and returns its task's ID. A VM that already has the name in
// the folder is a *Fault of kind FaultDuplicateName.
func (c *Client) Clone(ctx context.Context, req CloneRequest) (string, error) {
	t := req.Template
	cfg := cloneConfig(req)
	folder, pool := req.Folder.ref(), req.Pool.ref()
	spec := types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pool, Folder: &folder},
		PowerOn:  req.PowerOn,
		Config:   cfg,
	}
	if !req.Host.IsZero() {
		host := req.Host.ref()
		spec.Location.Host = &host
	}
	if req.Datastore != nil {
		ds := req.Datastore.Ref.ref()
		spec.Location.Datastore = &ds
	}
	if req.Linked {
		spec.Snapshot = t.snapshot
		spec.Location.DiskMoveType = string(types.VirtualMachineRelocateDiskMoveOptionsCreateNewChildDiskBacking)
	}
	keys := &keySource{next: -200}
	changes, locators, err := diskChanges(t.devices, req.Disks, keys, true)
	if err != nil {
		return "", err
	}
	nicChanges, err := c.nicChanges(ctx, t.devices, req.NICs, keys)
	if err != nil {
		return "", err
	}
	changes = append(changes, nicChanges...)
	cfg.DeviceChange = changes
	if !req.Linked {
		spec.Location.Disk = locators
	}
	res, err := methods.CloneVM_Task(ctx, c.vim, &types.CloneVM_Task{This: t.Ref.ref(), Folder: folder, Name: req.Name, Spec: spec})
	if err != nil {
		var dup *types.DuplicateName
		if asFault(err, &dup) {
			return "", &Fault{Kind: FaultDuplicateName, Object: refOf(dup.Object), Message: err.Error()}
		}
		return "", c.fail("clone template "+t.Ref.Value, err)
	}
	return res.Returnval.Value, nil
}

// cloneConfig is the configuration the clone takes: CPUs, memory, hot-add, identity,
// extraConfig and firmware; the devices are added to it by Clone.
func cloneConfig(req CloneRequest) *types.VirtualMachineConfigSpec {
	extra := make([]types.BaseOptionValue, 0, len(req.ExtraConfig))
	for _, o := range req.ExtraConfig {
		extra = append(extra, &types.OptionValue{Key: o.Key, Value: o.Value})
	}
	cfg := &types.VirtualMachineConfigSpec{
		NumCPUs:      req.CPUs,
		MemoryMB:     req.MemoryMiB,
		InstanceUuid: req.InstanceUUID,
		ExtraConfig:  extra,
	}
	if req.CPUHotAdd {
		cfg.CpuHotAddEnabled = types.NewBool(true)
	}
	if req.MemoryHotAdd {
		cfg.MemoryHotAddEnabled = types.NewBool(true)
	}
	if req.Firmware != "" {
		cfg.Firmware = string(req.Firmware)
	}
	if req.Firmware == FirmwareEFI {
		cfg.BootOptions = &types.VirtualMachineBootOptions{EfiSecureBootEnabled: types.NewBool(req.SecureBoot)}
	}
	return cfg
}
