package vcenter

import (
	"context"

	"github.com/vmware/govmomi/object"
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
