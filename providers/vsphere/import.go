package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vmware/govmomi/nfc"
	"github.com/vmware/govmomi/object"
	ovfimporter "github.com/vmware/govmomi/ovf/importer"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// importTemplate starts, or reports, the import of img's OVA (or OVF) from the URL from
// as the template name: downloaded (checking the checksum), uploaded through an
// HttpNfcLease, then marked a template.
func (s *session) importTemplate(ctx context.Context, img *providersdk.Image, name, from string) providersdk.ImageResult {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("template", name))
	key := name + " " + from + " " + img.Source.Checksum
	j := s.imports.Ensure(ctx, img.UID, key, from, func(ctx context.Context, j *providersdk.ImportJob) (string, error) {
		return s.runImport(ctx, j, name, from, img.Source.Checksum)
	})
	return j.Result(fmt.Sprintf("template %q", name), from, "vCenter "+s.host)
}

// run downloads the OVA (or OVF and its files) to a temporary directory, imports it into
// the first failure domain and marks it a template.
func (s *session) runImport(ctx context.Context, j *providersdk.ImportJob, name, from, checksum string) (string, error) {
	dir, err := os.MkdirTemp("", "banlieue-import-")
	if err != nil {
		return "", fmt.Errorf("failed to make a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	u, err := url.Parse(from)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", errors.New("importFrom is not an http or https URL")
	}
	local := filepath.Join(dir, path.Base(u.Path))
	if err := s.downloadFile(ctx, j, u, local, checksum); err != nil {
		return "", err
	}
	var archive ovfimporter.Archive = &ovfimporter.TapeArchive{Path: local}
	descriptor := "*.ovf"
	if strings.HasSuffix(strings.ToLower(u.Path), ".ovf") {
		archive = &ovfimporter.FileArchive{Path: local}
		descriptor = local
		if err := s.downloadReferences(ctx, j, u, local); err != nil {
			return "", err
		}
	}

	inv, err := s.domains(ctx, false)
	if err != nil {
		return "", err
	}
	if len(inv.domains) == 0 {
		return "", errors.New("vCenter has no compute cluster to import into")
	}
	fd := inv.domains[0]
	pl, err := s.place(ctx, &providersdk.Machine{Spec: infrav1.MachineSpec{FailureDomain: fd.name}}, &infrav1.VSphereOptions{})
	if err != nil {
		return "", err
	}
	imp := &ovfimporter.Importer{
		Client:       s.vim,
		Archive:      archive,
		Log:          func(string) (int, error) { return 0, nil },
		ResourcePool: object.NewResourcePool(s.vim, pl.pool),
		Folder:       object.NewFolder(s.vim, pl.folder),
		Datastore:    object.NewDatastore(s.vim, importDatastore(pl)),
	}
	info, lease, err := imp.ImportVApp(ctx, descriptor, ovfimporter.Options{Name: &name, DiskProvisioning: string(types.OvfCreateImportSpecParamsDiskProvisioningTypeThin)})
	if err != nil {
		return "", s.fail("start the import", err)
	}
	updater := lease.StartUpdater(ctx, info)
	defer updater.Done()
	for _, item := range info.Items {
		if err := s.upload(ctx, j, archive, lease, item); err != nil {
			_ = lease.Abort(context.WithoutCancel(ctx), &types.LocalizedMethodFault{Fault: &types.FileFault{File: item.Path}})
			return "", err
		}
	}
	if err := lease.Complete(ctx); err != nil {
		return "", s.fail("complete the import", err)
	}
	if err := object.NewVirtualMachine(s.vim, info.Entity).MarkAsTemplate(ctx); err != nil {
		return "", s.fail("mark the imported VM a template", err)
	}
	return info.Entity.Value, nil
}

// importDatastore is where imports go: the datastore parameter, else the failure
// domain's datastore with the most free space.
func importDatastore(pl *placement) types.ManagedObjectReference {
	if pl.datastore != nil {
		return pl.datastore.ref
	}
	var best datastoreInfo
	for _, ds := range pl.fd.datastores {
		if best.ref.Value == "" || ds.free > best.free || ds.free == best.free && ds.name < best.name {
			best = ds
		}
	}
	return best.ref
}

// upload sends one file of the archive through the lease, counting progress.
func (s *session) upload(ctx context.Context, j *providersdk.ImportJob, a ovfimporter.Archive, lease *nfc.Lease, item nfc.FileItem) error {
	f, size, err := a.Open(item.Path)
	if err != nil {
		return fmt.Errorf("failed to open %s in the image: %w", item.Path, err)
	}
	defer func() { _ = f.Close() }()
	if err := lease.Upload(ctx, item, j.Track(f), soap.Upload{ContentLength: size}); err != nil {
		return s.fail("upload "+item.Path, err)
	}
	return nil
}

// downloadFile fetches u into file, checking its digest when checksum is set. Downloading
// and uploading each count for half of the progress.
func (s *session) downloadFile(ctx context.Context, j *providersdk.ImportJob, u *url.URL, file, checksum string) error {
	out, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("failed to write the download: %w", err)
	}
	defer func() { _ = out.Close() }()
	if _, err := j.Download(ctx, s.driver.httpClient, u.String(), checksum, out, 2); err != nil {
		return err
	}
	return out.Close()
}

// downloadReferences fetches the files an OVF descriptor references, next to it.
func (s *session) downloadReferences(ctx context.Context, j *providersdk.ImportJob, u *url.URL, descriptor string) error {
	data, err := os.ReadFile(descriptor)
	if err != nil {
		return fmt.Errorf("failed to read the OVF descriptor: %w", err)
	}
	env, err := ovfimporter.ReadEnvelope(data)
	if err != nil {
		return fmt.Errorf("failed to parse the OVF descriptor: %w", err)
	}
	for _, f := range env.References {
		if strings.Contains(f.Href, "..") || path.IsAbs(f.Href) || strings.Contains(f.Href, "://") {
			return fmt.Errorf("the OVF descriptor references %q, outside its directory", f.Href)
		}
		ref := u.ResolveReference(&url.URL{Path: f.Href})
		if err := s.downloadFile(ctx, j, ref, filepath.Join(filepath.Dir(descriptor), filepath.FromSlash(f.Href)), ""); err != nil {
			return err
		}
	}
	return nil
}
