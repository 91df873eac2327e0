package vcenter

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Provisioning is how a disk's space is allocated.
type Provisioning string

// The provisioning of disks.
const (
	// ProvisioningDefault is thin for a new disk and leaves an existing disk's format.
	ProvisioningDefault Provisioning = ""
	// ProvisioningThin allocates space as it is written.
	ProvisioningThin Provisioning = "thin"
	// ProvisioningThick allocates all space up front.
	ProvisioningThick Provisioning = "thick"
	// ProvisioningEagerZeroed allocates and zeroes all space up front.
	ProvisioningEagerZeroed Provisioning = "eagerZeroed"
)

// Disk is one disk of a clone or a reconfiguration: the VM's disk at its position in bus
// order, or a new disk beyond them.
type Disk struct {
	// Bytes is the disk's size. An existing disk grows to it; one that is larger is
	// left as it is (vSphere disks do not shrink).
	Bytes int64
	// Provisioning is the disk's format.
	Provisioning Provisioning
	// Datastore is where the disk goes; nil puts a new disk with the VM and leaves an
	// existing one where it is.
	Datastore *Datastore
}

// NIC is one network card of a clone.
type NIC struct {
	// Interface names the card in messages.
	Interface string
	// Network is the network the card is on; zero keeps the template's card as it is.
	Network Ref
	// NetworkName names the network in messages.
	NetworkName string
}

// diskChanges grows the existing disks the request makes larger and adds the disks it
// has beyond them, with their provisioning, on their datastore. For a clone it also
// returns disk locators that place the template's disks and set their format.
func diskChanges(devices object.VirtualDeviceList, want []Disk, keys *keySource, clone bool) ([]types.BaseVirtualDeviceConfigSpec, []types.VirtualMachineRelocateSpecDiskLocator, error) {
	existing := disks(devices)
	var (
		changes  []types.BaseVirtualDeviceConfigSpec
		locators []types.VirtualMachineRelocateSpecDiskLocator
		ctl      *controller
	)
	for i, d := range want {
		if i < len(existing) {
			disk := existing[i]
			if d.Bytes > diskBytes(disk) {
				disk.CapacityInBytes, disk.CapacityInKB = d.Bytes, d.Bytes/1024
				changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: disk})
			}
			if clone && (d.Datastore != nil || d.Provisioning != ProvisioningDefault) {
				loc := types.VirtualMachineRelocateSpecDiskLocator{DiskId: disk.Key, DiskBackingInfo: flatBacking("", nil, d.Provisioning)}
				switch b, ok := disk.Backing.(*types.VirtualDiskFlatVer2BackingInfo); {
				case d.Datastore != nil:
					loc.Datastore = d.Datastore.Ref.ref()
				case ok && b.Datastore != nil:
					loc.Datastore = *b.Datastore
				default:
					continue
				}
				locators = append(locators, loc)
			}
			continue
		}
		if ctl == nil {
			var add types.BaseVirtualDeviceConfigSpec
			ctl, add = scsiController(devices, keys)
			if add != nil {
				changes = append(changes, add)
			}
		}
		u, err := ctl.freeUnit()
		if err != nil {
			return nil, nil, err
		}
		fileName := ""
		var dsRef *types.ManagedObjectReference
		if d.Datastore != nil {
			ref := d.Datastore.Ref.ref()
			fileName, dsRef = "["+d.Datastore.Name+"]", &ref
		}
		disk := &types.VirtualDisk{
			VirtualDevice: types.VirtualDevice{
				Key: keys.take(), ControllerKey: ctl.key, UnitNumber: &u,
				Backing: flatBacking(fileName, dsRef, d.Provisioning),
			},
			CapacityInKB: d.Bytes / 1024, CapacityInBytes: d.Bytes,
		}
		changes = append(changes, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate, Device: disk,
		})
	}
	return changes, locators, nil
}

// nicChanges re-backs the template's NICs onto the request's networks, adds vmxnet3
// NICs for the rest and removes the template's extra NICs. No NICs keeps the template's.
func (c *Client) nicChanges(ctx context.Context, devices object.VirtualDeviceList, want []NIC, keys *keySource) ([]types.BaseVirtualDeviceConfigSpec, error) {
	if len(want) == 0 {
		return nil, nil
	}
	existing := nics(devices)
	var changes []types.BaseVirtualDeviceConfigSpec
	for i, n := range want {
		if n.Network.IsZero() {
			if i < len(existing) {
				continue // keep the template's network
			}
			return nil, fmt.Errorf("failed to create NIC for interface %s: it names no network", n.Interface)
		}
		netRef, ok := object.NewReference(c.vim, n.Network.ref()).(object.NetworkReference)
		if !ok {
			return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "interface %q: %q is not a network", n.Interface, n.NetworkName)
		}
		backing, err := netRef.EthernetCardBackingInfo(ctx)
		if err != nil {
			return nil, c.fail("read network "+n.NetworkName, err)
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
			return nil, fmt.Errorf("failed to create NIC for interface %s: %w", n.Interface, err)
		}
		card := dev.(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
		card.Key = keys.take()
		card.Connectable = &types.VirtualDeviceConnectInfo{StartConnected: true, AllowGuestControl: true, Connected: true}
		changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: dev})
	}
	for _, extra := range existing[min(len(want), len(existing)):] {
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

// flatBacking is a VMDK backing with the asked-for provisioning; thin by default.
func flatBacking(fileName string, ds *types.ManagedObjectReference, p Provisioning) *types.VirtualDiskFlatVer2BackingInfo {
	thin, eager := true, false
	switch p {
	case ProvisioningThick:
		thin = false
	case ProvisioningEagerZeroed:
		thin, eager = false, true
	}
	return &types.VirtualDiskFlatVer2BackingInfo{
		VirtualDeviceFileBackingInfo: types.VirtualDeviceFileBackingInfo{FileName: fileName, Datastore: ds},
		DiskMode:                     string(types.VirtualDiskModePersistent),
		ThinProvisioned:              types.NewBool(thin),
		EagerlyScrub:                 types.NewBool(eager),
	}
}

// controller is a SCSI controller new disks go on, and its units in use.
type controller struct {
	key  int32
	used map[int32]bool
}

// scsiController returns the first SCSI controller, or a new paravirtual one with the
// spec that adds it.
func scsiController(devices object.VirtualDeviceList, keys *keySource) (*controller, types.BaseVirtualDeviceConfigSpec) {
	var found types.BaseVirtualSCSIController
	for _, d := range devices {
		if c, ok := d.(types.BaseVirtualSCSIController); ok {
			if found == nil || c.GetVirtualSCSIController().Key < found.GetVirtualSCSIController().Key {
				found = c
			}
		}
	}
	if found == nil {
		pv := &types.ParaVirtualSCSIController{VirtualSCSIController: types.VirtualSCSIController{
			SharedBus:         types.VirtualSCSISharingNoSharing,
			VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: keys.take()}},
		}}
		return &controller{key: pv.Key, used: map[int32]bool{}},
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: pv}
	}
	c := &controller{key: found.GetVirtualSCSIController().Key, used: map[int32]bool{}}
	for _, d := range devices {
		if v := d.GetVirtualDevice(); v.ControllerKey == c.key && v.UnitNumber != nil {
			c.used[*v.UnitNumber] = true
		}
	}
	return c, nil
}

// freeUnit takes the controller's lowest free unit; unit 7 is the controller's own.
func (c *controller) freeUnit() (int32, error) {
	for u := int32(0); u < 16; u++ {
		if u != 7 && !c.used[u] {
			c.used[u] = true
			return u, nil
		}
	}
	return 0, providersdk.Permanent(infrav1.MachineFailedReason, "the VM's SCSI controller has no free unit for another disk")
}
