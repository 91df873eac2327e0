package vcenter

import (
	"context"
	"strings"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// Template is what a clone needs of its template.
type Template struct {
	// Ref is the template.
	Ref Ref
	// DiskBytes are the sizes of its disks in bus order.
	DiskBytes []int64
	// NICs is how many network cards it has.
	NICs int
	// HasSnapshot is true when it has a current snapshot, which a linked clone needs.
	HasSnapshot bool

	devices  object.VirtualDeviceList
	snapshot *types.ManagedObjectReference
}

// FindTemplate finds a template by inventory path (when ref holds a '/') or by name, in
// one inventory query. Of several templates with the name, the oldest (lowest managed
// object ID) is chosen, so the answer is stable. It returns ErrNotFound when there is no
// such template (a VM that is not one does not count).
func (c *Client) FindTemplate(ctx context.Context, ref string) (Ref, error) {
	if strings.Contains(ref, "/") {
		obj, err := object.NewSearchIndex(c.vim).FindByInventoryPath(ctx, ref)
		if err != nil {
			return Ref{}, c.fail("find template "+ref, err)
		}
		if obj == nil || obj.Reference().Type != "VirtualMachine" {
			return Ref{}, notFound("template " + ref)
		}
		var vm mo.VirtualMachine
		err = property.DefaultCollector(c.vim).RetrieveOne(ctx, obj.Reference(), []string{"config.template"}, &vm)
		if err != nil {
			if fault.Is(err, &types.ManagedObjectNotFound{}) {
				return Ref{}, notFound("template " + ref)
			}
			return Ref{}, c.fail("read template "+ref, err)
		}
		if vm.Config == nil || !vm.Config.Template {
			return Ref{}, notFound("template " + ref)
		}
		return refOf(obj.Reference()), nil
	}
	vms, err := c.retrieveView(ctx, map[string][]string{"VirtualMachine": {"name", "config.template"}})
	if err != nil {
		return Ref{}, c.fail("find template "+ref, err)
	}
	var best *types.ManagedObjectReference
	for i := range vms {
		if vms[i].name != ref || vms[i].props["config.template"] != true {
			continue
		}
		if best == nil || morefLess(vms[i].ref, *best) {
			best = &vms[i].ref
		}
	}
	if best == nil {
		return Ref{}, notFound("template " + ref)
	}
	return refOf(*best), nil
}

// morefLess orders managed object IDs by age: vm-9 before vm-10.
func morefLess(a, b types.ManagedObjectReference) bool {
	if len(a.Value) != len(b.Value) {
		return len(a.Value) < len(b.Value)
	}
	return a.Value < b.Value
}

// ReadTemplate reads the devices and snapshot of the template ref. It returns
// ErrNotFound when it no longer exists or is a VM that is not a template.
func (c *Client) ReadTemplate(ctx context.Context, ref Ref) (*Template, error) {
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(c.vim).RetrieveOne(ctx, ref.ref(), []string{"config.template", "config.hardware.device", "snapshot"}, &vm); err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return nil, notFound("template " + ref.Value)
		}
		return nil, c.fail("read template "+ref.Value, err)
	}
	// A clone source must be a template: a running VM named by its ID (another
	// tenant's, say) is not one, and is treated as no template at all.
	if vm.Config == nil || !vm.Config.Template {
		return nil, notFound("template " + ref.Value)
	}
	t := &Template{Ref: ref}
	if vm.Config != nil {
		t.devices = vm.Config.Hardware.Device
	}
	for _, d := range disks(t.devices) {
		t.DiskBytes = append(t.DiskBytes, diskBytes(d))
	}
	t.NICs = len(nics(t.devices))
	if vm.Snapshot != nil && vm.Snapshot.CurrentSnapshot != nil {
		t.snapshot, t.HasSnapshot = vm.Snapshot.CurrentSnapshot, true
	}
	return t, nil
}
