package vcenter

import (
	"context"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/types"
)

// LocatedVM is a VM with its firmware and where it is in the inventory, as
// LocatedVMs reads them.
type LocatedVM struct {
	VM
	// Firmware is config.firmware: FirmwareBIOS, FirmwareEFI, or "" when vCenter does
	// not say.
	Firmware Firmware
	// SecureBoot is config.bootOptions.efiSecureBootEnabled.
	SecureBoot bool
	// Location is where the VM is: its path, its folder's (or vApp's) path and its
	// datacenter.
	Location Location
}

// locatedVMProperties are the VM properties LocatedVMs reads, besides the identity key
// and the name and parent every inventory object is read with.
var locatedVMProperties = []string{
	"config.uuid",
	"config.template",
	"config.hardware.numCPU",
	"config.hardware.memoryMB",
	"config.hardware.device",
	"config.firmware",
	"config.bootOptions",
	"runtime.powerState",
	"parentVApp",
}

// LocatedVMs reads every VM and template below container (a datacenter, a folder or
// the root folder) with its name, BIOS UUID, template flag, the Client's IdentityKey in
// extraConfig (read as a keyed path, as MarkedVMs does), CPUs, memory, disks, firmware
// and power state, and where it is: one property collector call through a container
// view that also follows each VM's parent (and parentVApp) up to the root folder, so
// that the names of the folders and the datacenter come in the same answer, whatever
// the number of VMs.
func (c *Client) LocatedVMs(ctx context.Context, container Ref) ([]LocatedVM, error) {
	const what = "list the VMs and where they are"
	v, err := view.NewManager(c.vim).CreateContainerView(ctx, container.ref(), []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, c.fail(what, err)
	}
	defer func() { _ = v.Destroy(context.WithoutCancel(ctx)) }()

	const up, vapp = "locatedUp", "locatedVApp"
	spec := types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{
			Obj:  v.Reference(),
			Skip: types.NewBool(true),
			SelectSet: []types.BaseSelectionSpec{
				&types.TraversalSpec{
					Type: "ContainerView", Path: "view", Skip: types.NewBool(false),
					SelectSet: []types.BaseSelectionSpec{&types.SelectionSpec{Name: up}, &types.SelectionSpec{Name: vapp}},
				},
				&types.TraversalSpec{
					SelectionSpec: types.SelectionSpec{Name: up},
					Type:          "ManagedEntity", Path: "parent", Skip: types.NewBool(false),
					SelectSet: []types.BaseSelectionSpec{&types.SelectionSpec{Name: up}},
				},
				&types.TraversalSpec{
					SelectionSpec: types.SelectionSpec{Name: vapp},
					Type:          "VirtualMachine", Path: "parentVApp", Skip: types.NewBool(false),
					SelectSet: []types.BaseSelectionSpec{&types.SelectionSpec{Name: up}},
				},
			},
		}},
		PropSet: []types.PropertySpec{
			{Type: "ManagedEntity", PathSet: []string{"name", "parent"}},
			{Type: "VirtualMachine", PathSet: append(append([]string{}, locatedVMProperties...), c.identityProperty())},
		},
	}
	res, err := property.DefaultCollector(c.vim).RetrieveProperties(ctx, types.RetrieveProperties{SpecSet: []types.PropertyFilterSpec{spec}})
	if err != nil {
		return nil, c.fail(what, err)
	}

	byRef := map[types.ManagedObjectReference]*entity{}
	for _, oc := range res.Returnval {
		e := &entity{ref: oc.Obj}
		for _, p := range oc.PropSet {
			switch val := p.Val.(type) {
			case string:
				if p.Name == "name" {
					e.name = val
				}
			case types.ManagedObjectReference:
				// A VM in a vApp has no parent folder: its vApp holds it.
				if p.Name == "parent" || (p.Name == "parentVApp" && e.parent == nil) {
					e.parent = &val
				}
			}
		}
		byRef[oc.Obj] = e
	}
	var out []LocatedVM
	for _, oc := range res.Returnval {
		if oc.Obj.Type != "VirtualMachine" {
			continue
		}
		// vmOf takes a reference-valued property for the VM's host; none is read here.
		props := make([]types.DynamicProperty, 0, len(oc.PropSet))
		vm := LocatedVM{}
		for _, p := range oc.PropSet {
			switch p.Name {
			case "parent", "parentVApp":
				continue
			case "config.firmware":
				s, _ := p.Val.(string)
				vm.Firmware = Firmware(s)
			case "config.bootOptions":
				vm.SecureBoot = secureBoot(p.Val)
				continue
			}
			props = append(props, p)
		}
		vm.VM = *c.vmOf(oc.Obj, props)
		vm.devices = nil // not kept: the VM is only reported
		e := byRef[oc.Obj]
		vm.Location.Path = inventoryPath(byRef, e)
		if e.parent != nil {
			if p := byRef[*e.parent]; p != nil {
				vm.Location.ParentPath = inventoryPath(byRef, p)
			}
		}
		if dc := datacenterOf(byRef, e); dc != nil {
			vm.Location.DatacenterName, vm.Location.DatacenterPath = dc.name, inventoryPath(byRef, dc)
		}
		out = append(out, vm)
	}
	return out, nil
}

// secureBoot reads efiSecureBootEnabled from a config.bootOptions value.
func secureBoot(v any) bool {
	var b *types.VirtualMachineBootOptions
	switch o := v.(type) {
	case types.VirtualMachineBootOptions:
		b = &o
	case *types.VirtualMachineBootOptions:
		b = o
	}
	return b != nil && b.EfiSecureBootEnabled != nil && *b.EfiSecureBootEnabled
}
