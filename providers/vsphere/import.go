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

	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
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

// runImport downloads the OVA (or OVF and its files) to a temporary directory, imports it into
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("failed to make a temporary directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	base := path.Base(u.Path)
	local := filepath.Join(dir, base)
	if err := s.downloadFile(ctx, j, root, u, base, checksum); err != nil {
		return "", err
	}
	isOVF := strings.HasSuffix(strings.ToLower(u.Path), ".ovf")
	if isOVF {
		if err := s.downloadReferences(ctx, j, root, u, base); err != nil {
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
	ref, err := s.vc.Import(ctx, vcenter.ImportRequest{
		Path: local, OVF: isOVF, Name: name,
		Folder: pl.folder, Pool: pl.pool, Datastore: pl.importDatastore(),
		Track: j.Track,
	})
	if err != nil {
		return "", err
	}
	return ref.Value, nil
}

// downloadFile fetches u into file under root, checking its digest when checksum is set.
// Downloading and uploading each count for half of the progress.
func (s *session) downloadFile(ctx context.Context, j *providersdk.ImportJob, root *os.Root, u *url.URL, file, checksum string) error {
	out, err := root.Create(file)
	if err != nil {
		return fmt.Errorf("failed to write the download: %w", err)
	}
	defer func() { _ = out.Close() }()
	if _, err := j.Download(ctx, u.String(), checksum, out, 2); err != nil {
		return err
	}
	return out.Close()
}

// downloadReferences fetches the files the OVF descriptor under root references, next to it.
func (s *session) downloadReferences(ctx context.Context, j *providersdk.ImportJob, root *os.Root, u *url.URL, descriptor string) error {
	data, err := root.ReadFile(descriptor)
	if err != nil {
		return fmt.Errorf("failed to read the OVF descriptor: %w", err)
	}
	hrefs, err := vcenter.OVFReferences(data)
	if err != nil {
		return err
	}
	for _, href := range hrefs {
		if strings.Contains(href, "..") || path.IsAbs(href) || strings.Contains(href, "://") {
			return fmt.Errorf("the OVF descriptor references %q, outside its directory", href)
		}
		ref := u.ResolveReference(&url.URL{Path: href})
		if err := s.downloadFile(ctx, j, root, ref, filepath.Join(filepath.Dir(descriptor), filepath.FromSlash(href)), ""); err != nil {
			return err
		}
	}
	return nil
}
