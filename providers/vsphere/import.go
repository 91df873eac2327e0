package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	// Every file the package's descriptor references is verified against its manifest
	// before anything reaches vCenter.
	isOVF := strings.HasSuffix(strings.ToLower(u.Path), ".ovf")
	if isOVF {
		if err := s.downloadOVFPackage(ctx, j, root, u, base, checksum != ""); err != nil {
			return "", err
		}
	} else if err := verifyOVA(local, checksum != ""); err != nil {
		return "", err
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

// downloadOVFPackage fetches the manifest of the OVF descriptor under root (its name
// with .mf, next to it at u, if the server has one) and the files the descriptor
// references, next to it, and verifies them. Without a manifest it refuses before
// downloading anything more when checksumWanted.
func (s *session) downloadOVFPackage(ctx context.Context, j *providersdk.ImportJob, root *os.Root, u *url.URL, descriptor string, checksumWanted bool) error {
	data, err := root.ReadFile(descriptor)
	if err != nil {
		return fmt.Errorf("failed to read the OVF descriptor: %w", err)
	}
	hrefs, err := ovfReferences(data)
	if err != nil {
		return err
	}
	m, err := s.downloadManifest(ctx, j, root, u, descriptor)
	if err != nil {
		return err
	}
	if m == nil && checksumWanted {
		return verifyOVF(root, descriptor, hrefs, nil, true)
	}
	for _, href := range hrefs {
		ref := u.ResolveReference(&url.URL{Path: href})
		if err := s.downloadFile(ctx, j, root, ref, filepath.Join(filepath.Dir(descriptor), filepath.FromSlash(href)), ""); err != nil {
			return err
		}
	}
	return verifyOVF(root, descriptor, hrefs, m, checksumWanted)
}

// downloadManifest fetches the descriptor's manifest, next to it at u; nil when the
// server has none (404, 403 or 410, as object stores answer for a missing object).
func (s *session) downloadManifest(ctx context.Context, j *providersdk.ImportJob, root *os.Root, u *url.URL, descriptor string) (*manifest, error) {
	name := strings.TrimSuffix(descriptor, path.Ext(descriptor)) + ".mf"
	ref := u.ResolveReference(&url.URL{Path: name})
	var status *providersdk.HTTPStatusError
	err := s.downloadFile(ctx, j, root, ref, name, "")
	switch {
	case errors.As(err, &status) && (status.Code == http.StatusNotFound || status.Code == http.StatusForbidden || status.Code == http.StatusGone):
		_ = root.Remove(name)
		return nil, nil
	case err != nil:
		return nil, err
	}
	data, err := root.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("failed to read the manifest %s: %w", name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("the manifest %s is larger than %d MiB, more than a manifest needs", name, maxManifestBytes>>20)
	}
	return parseManifest(name, data)
}
