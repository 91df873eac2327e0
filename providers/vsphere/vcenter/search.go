package vcenter

import (
	"context"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/types"
)

// FindByInventoryPath finds the object at an inventory path such as /DC0/vm/web. It
// returns ErrNotFound when there is none; what names the object in messages.
func (c *Client) FindByInventoryPath(ctx context.Context, path, what string) (Ref, error) {
	obj, err := object.NewSearchIndex(c.vim).FindByInventoryPath(ctx, path)
	if err != nil {
		return Ref{}, c.fail("find "+what+" "+path, err)
	}
	if obj == nil {
		return Ref{}, notFound(what + " " + path)
	}
	return refOf(obj.Reference()), nil
}

// FindChild finds the object named name directly in folder. It returns ErrNotFound when
// there is none; what names the object in messages.
func (c *Client) FindChild(ctx context.Context, folder Ref, name, what string) (Ref, error) {
	obj, err := object.NewSearchIndex(c.vim).FindChild(ctx, object.NewFolder(c.vim, folder.ref()), name)
	if err != nil {
		return Ref{}, c.fail("look for "+what+" "+name, err)
	}
	if obj == nil {
		return Ref{}, notFound(what + " " + name)
	}
	return refOf(obj.Reference()), nil
}

// Location is where an object is in the inventory.
type Location struct {
	// Path is the object's inventory path, e.g. /DC0/vm/web/db-1.
	Path string
	// ParentPath is the inventory path of what holds it: a VM's folder, or its vApp.
	ParentPath string
	// DatacenterName and DatacenterPath name the datacenter it is in; empty when none.
	DatacenterName, DatacenterPath string
}

// Locate reads where the object ref is: the names and parents of it and of all its
// ancestors, in one property collector call that follows parent (and a VM's
// parentVApp) up to the root folder. It returns ErrNotFound when the object no longer
// exists.
func (c *Client) Locate(ctx context.Context, ref Ref) (Location, error) {
	const up = "traverseParent"
	res, err := property.DefaultCollector(c.vim).RetrieveProperties(ctx, types.RetrieveProperties{
		SpecSet: []types.PropertyFilterSpec{{
			ObjectSet: []types.ObjectSpec{{
				Obj:  ref.ref(),
				Skip: types.NewBool(false),
				SelectSet: []types.BaseSelectionSpec{
					&types.TraversalSpec{
						SelectionSpec: types.SelectionSpec{Name: up},
						Type:          "ManagedEntity",
						Path:          "parent",
						Skip:          types.NewBool(false),
						SelectSet:     []types.BaseSelectionSpec{&types.SelectionSpec{Name: up}},
					},
					&types.TraversalSpec{
						Type:      "VirtualMachine",
						Path:      "parentVApp",
						Skip:      types.NewBool(false),
						SelectSet: []types.BaseSelectionSpec{&types.SelectionSpec{Name: up}},
					},
				},
			}},
			PropSet: []types.PropertySpec{
				{Type: "ManagedEntity", PathSet: []string{"name", "parent"}},
				{Type: "VirtualMachine", PathSet: []string{"parentVApp"}},
			},
		}},
	})
	if err != nil {
		if fault.Is(err, &types.ManagedObjectNotFound{}) {
			return Location{}, notFound(ref.Type + " " + ref.Value)
		}
		return Location{}, c.fail("locate "+ref.Value+" in the inventory", err)
	}
	byRef := map[types.ManagedObjectReference]*entity{}
	for _, oc := range res.Returnval {
		e := &entity{ref: oc.Obj}
		for _, p := range oc.PropSet {
			switch v := p.Val.(type) {
			case string:
				if p.Name == "name" {
					e.name = v
				}
			case types.ManagedObjectReference:
				// A VM in a vApp has no parent folder: its vApp holds it.
				if p.Name == "parent" || e.parent == nil {
					e.parent = &v
				}
			}
		}
		byRef[oc.Obj] = e
	}
	e := byRef[ref.ref()]
	if e == nil {
		return Location{}, notFound(ref.Type + " " + ref.Value)
	}
	loc := Location{Path: inventoryPath(byRef, e)}
	if e.parent != nil {
		if p := byRef[*e.parent]; p != nil {
			loc.ParentPath = inventoryPath(byRef, p)
		}
	}
	if dc := datacenterOf(byRef, e); dc != nil {
		loc.DatacenterName, loc.DatacenterPath = dc.name, inventoryPath(byRef, dc)
	}
	return loc, nil
}
