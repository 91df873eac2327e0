package vspheresim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// Names in the simulated inventory: govmomi's VPX model names its objects this way
// whatever their number, and clients of the simulator (the driver's tests, the Provider
// 'banlieue dev' writes) refer to them.
const (
	// Datacenter is the (first) datacenter's name.
	Datacenter = "DC0"
	// Cluster is the first compute cluster's name; Start creates the templates in it.
	Cluster = "DC0_C0"
	// Datastore is the first datastore, which every host mounts; the templates' disks
	// are on it.
	Datastore = "LocalDS_0"
	// Network is the standard port group every host has; the templates' NICs are on it.
	Network = "VM Network"
	// PortGroup is the first distributed port group.
	PortGroup = "DC0_DVPG0"
)

// The hardware of every template Start makes, that of a small cloud image.
const (
	// DefaultTemplate is the template Start makes when Options.Templates is nil.
	DefaultTemplate = "ubuntu-22.04"
	// TemplateCPUs is the number of virtual CPUs of a template.
	TemplateCPUs = 2
	// TemplateMemoryMiB is the memory of a template.
	TemplateMemoryMiB = 2048
	// TemplateDiskGiB is the size of a template's one disk, thin provisioned on a
	// paravirtual SCSI controller.
	TemplateDiskGiB = 10
)

// makeTemplates creates a template of each name in the first cluster of the first
// datacenter, with the hardware a real template has (a disk to grow, a NIC to
// reconnect), so that clones behave as clones of a real template do. It returns the
// templates' managed object IDs by name.
func makeTemplates(ctx context.Context, c *govmomi.Client, names []string) (map[string]string, error) {
	return makeVMs(ctx, c, names, true)
}

// makeVMs creates a VM of each name as makeTemplates does, and marks it a template when
// template is true, or else powers it on: a VM someone made by hand, as a vCenter that
// banlieue meets has many. It returns the VMs' managed object IDs by name.
func makeVMs(ctx context.Context, c *govmomi.Client, names []string, template bool) (map[string]string, error) {
	refs := map[string]string{}
	if len(names) == 0 {
		return refs, nil
	}
	finder := find.NewFinder(c.Client)
	dcs, err := finder.DatacenterList(ctx, "*")
	if err != nil {
		return nil, fmt.Errorf("failed to find a datacenter for the templates: %w", err)
	}
	dc := firstByName(dcs)
	finder.SetDatacenter(dc)
	clusters, err := finder.ClusterComputeResourceList(ctx, "*")
	if err != nil {
		return nil, fmt.Errorf("failed to find a cluster for the templates: %w", err)
	}
	cluster := firstByName(clusters)
	pool, err := cluster.ResourcePool(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to find the resource pool of %s: %w", cluster.Name(), err)
	}
	datastore, err := firstDatastore(ctx, c, cluster)
	if err != nil {
		return nil, err
	}
	network, err := finder.Network(ctx, Network)
	if err != nil {
		return nil, fmt.Errorf("failed to find the network for the templates: %w", err)
	}
	backing, err := network.EthernetCardBackingInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to read the network %s: %w", Network, err)
	}
	folders, err := dc.Folders(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to find the VM folder of %s: %w", dc.Name(), err)
	}
	for _, name := range names {
		spec, err := templateSpec(name, datastore, backing)
		if err != nil {
			return nil, err
		}
		task, err := folders.VmFolder.CreateVM(ctx, spec, pool, nil)
		if err != nil {
			return nil, fmt.Errorf("failed to create the template %s: %w", name, err)
		}
		info, err := task.WaitForResult(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to create the template %s: %w", name, err)
		}
		ref := info.Result.(types.ManagedObjectReference)
		vm := object.NewVirtualMachine(c.Client, ref)
		if template {
			if err := vm.MarkAsTemplate(ctx); err != nil {
				return nil, fmt.Errorf("failed to mark %s as a template: %w", name, err)
			}
		} else if err := powerOn(ctx, vm); err != nil {
			return nil, fmt.Errorf("failed to power on %s: %w", name, err)
		}
		refs[name] = ref.Value
	}
	return refs, nil
}

// templateSpec is a powered-off VM on datastore: TemplateCPUs, TemplateMemoryMiB, a
// thin TemplateDiskGiB disk on a paravirtual SCSI controller and a vmxnet3 NIC with
// backing.
func templateSpec(name, datastore string, backing types.BaseVirtualDeviceBackingInfo) (types.VirtualMachineConfigSpec, error) {
	nic, err := object.EthernetCardTypes().CreateEthernetCard("vmxnet3", backing)
	if err != nil {
		return types.VirtualMachineConfigSpec{}, fmt.Errorf("failed to make a NIC: %w", err)
	}
	// Negative keys tie the new devices together (the disk to its controller) before
	// vCenter gives them real ones.
	const controllerKey, diskKey, nicKey = -100, -101, -102
	nic.GetVirtualDevice().Key = nicKey
	unit := int32(0)
	path := "[" + datastore + "]"
	return types.VirtualMachineConfigSpec{
		Name:     name,
		GuestId:  string(types.VirtualMachineGuestOsIdentifierUbuntu64Guest),
		NumCPUs:  TemplateCPUs,
		MemoryMB: TemplateMemoryMiB,
		Files:    &types.VirtualMachineFileInfo{VmPathName: path},
		DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{
				Operation: types.VirtualDeviceConfigSpecOperationAdd,
				Device: &types.ParaVirtualSCSIController{VirtualSCSIController: types.VirtualSCSIController{
					SharedBus:         types.VirtualSCSISharingNoSharing,
					VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: controllerKey}},
				}},
			},
			&types.VirtualDeviceConfigSpec{
				Operation:     types.VirtualDeviceConfigSpecOperationAdd,
				FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate,
				Device: &types.VirtualDisk{
					VirtualDevice: types.VirtualDevice{
						Key: diskKey, ControllerKey: controllerKey, UnitNumber: &unit,
						Backing: &types.VirtualDiskFlatVer2BackingInfo{
							VirtualDeviceFileBackingInfo: types.VirtualDeviceFileBackingInfo{FileName: path},
							DiskMode:                     string(types.VirtualDiskModePersistent),
							ThinProvisioned:              types.NewBool(true),
						},
					},
					CapacityInKB: TemplateDiskGiB << 20,
				},
			},
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: nic},
		},
	}, nil
}

// firstDatastore is the name of the first (by name) datastore the cluster mounts, so
// that the templates land on Datastore in the VPX model.
func firstDatastore(ctx context.Context, c *govmomi.Client, cluster *object.ClusterComputeResource) (string, error) {
	var cr mo.ClusterComputeResource
	if err := cluster.Properties(ctx, cluster.Reference(), []string{"datastore"}, &cr); err != nil {
		return "", fmt.Errorf("failed to list the datastores of %s: %w", cluster.Name(), err)
	}
	if len(cr.Datastore) == 0 {
		return "", fmt.Errorf("no datastore for the templates: cluster %s mounts none", cluster.Name())
	}
	var dss []mo.Datastore
	if err := property.DefaultCollector(c.Client).Retrieve(ctx, cr.Datastore, []string{"name"}, &dss); err != nil {
		return "", fmt.Errorf("failed to read the datastores of %s: %w", cluster.Name(), err)
	}
	names := make([]string, 0, len(dss))
	for _, ds := range dss {
		names = append(names, ds.Name)
	}
	return slices.Min(names), nil
}

// firstByName is the object with the least name (Datacenter, Cluster in the VPX
// model): the finder lists in inventory order, which nothing promises. The finder
// fails rather than list nothing, so objs is never empty.
func firstByName[T interface{ Name() string }](objs []T) T {
	return slices.MinFunc(objs, func(a, b T) int { return strings.Compare(a.Name(), b.Name()) })
}

// powerOn powers vm on and waits for it.
func powerOn(ctx context.Context, vm *object.VirtualMachine) error {
	task, err := vm.PowerOn(ctx)
	if err != nil {
		return err
	}
	return task.Wait(ctx)
}
