package vcenter

import (
	"context"
	"fmt"
	"io"

	"github.com/vmware/govmomi/nfc"
	"github.com/vmware/govmomi/object"
	ovfimporter "github.com/vmware/govmomi/ovf/importer"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// ImportRequest is an OVA or OVF package on local disk to import as a template.
type ImportRequest struct {
	// Path is the OVA file, or the OVF descriptor with the files it references next to it.
	Path string
	// OVF is true when Path is an OVF descriptor rather than an OVA.
	OVF bool
	// Name is the template's name.
	Name string
	// Folder, Pool and Datastore are where the template goes.
	Folder, Pool, Datastore Ref
	// Track wraps each file's reader as it is uploaded, to count progress; nil uploads
	// it as it is.
	Track func(io.Reader) io.Reader
}

// Import uploads the package through an HttpNfcLease, its disks thin, marks the VM it
// made a template and returns it.
func (c *Client) Import(ctx context.Context, req ImportRequest) (Ref, error) {
	var archive ovfimporter.Archive = &ovfimporter.TapeArchive{Path: req.Path}
	descriptor := "*.ovf"
	if req.OVF {
		archive = &ovfimporter.FileArchive{Path: req.Path}
		descriptor = req.Path
	}
	imp := &ovfimporter.Importer{
		Client:       c.vim,
		Archive:      archive,
		Log:          func(string) (int, error) { return 0, nil },
		ResourcePool: object.NewResourcePool(c.vim, req.Pool.ref()),
		Folder:       object.NewFolder(c.vim, req.Folder.ref()),
		Datastore:    object.NewDatastore(c.vim, req.Datastore.ref()),
	}
	name := req.Name
	info, lease, err := imp.ImportVApp(ctx, descriptor, ovfimporter.Options{Name: &name, DiskProvisioning: string(types.OvfCreateImportSpecParamsDiskProvisioningTypeThin)})
	if err != nil {
		return Ref{}, c.fail("start the import", err)
	}
	updater := lease.StartUpdater(ctx, info)
	defer updater.Done()
	for _, item := range info.Items {
		if err := c.upload(ctx, archive, lease, item, req.Track); err != nil {
			_ = lease.Abort(context.WithoutCancel(ctx), &types.LocalizedMethodFault{Fault: &types.FileFault{File: item.Path}})
			return Ref{}, err
		}
	}
	if err := lease.Complete(ctx); err != nil {
		return Ref{}, c.fail("complete the import", err)
	}
	if err := object.NewVirtualMachine(c.vim, info.Entity).MarkAsTemplate(ctx); err != nil {
		return Ref{}, c.fail("mark the imported VM a template", err)
	}
	return refOf(info.Entity), nil
}

// upload sends one file of the archive through the lease.
func (c *Client) upload(ctx context.Context, a ovfimporter.Archive, lease *nfc.Lease, item nfc.FileItem, track func(io.Reader) io.Reader) error {
	f, size, err := a.Open(item.Path)
	if err != nil {
		return fmt.Errorf("failed to open %s in the image: %w", item.Path, err)
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if track != nil {
		r = track(f)
	}
	if err := lease.Upload(ctx, item, r, soap.Upload{ContentLength: size}); err != nil {
		return c.fail("upload "+item.Path, err)
	}
	return nil
}

// OVFReferences returns the file names an OVF descriptor references, as they are written.
func OVFReferences(descriptor []byte) ([]string, error) {
	env, err := ovfimporter.ReadEnvelope(descriptor)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the OVF descriptor: %w", err)
	}
	out := make([]string, 0, len(env.References))
	for _, f := range env.References {
		out = append(out, f.Href)
	}
	return out, nil
}
