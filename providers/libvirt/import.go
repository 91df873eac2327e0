package libvirt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// importImage starts, or reports, the import of img from the URL from into the volume
// target: downloaded (checking the checksum) to a temporary file, uploaded into
// "<volume>.part" through libvirt's stream, copied to the volume and deleted, so the
// volume only ever exists complete.
func (s *session) importImage(ctx context.Context, img *providersdk.Image, target volumeRef, from string) providersdk.ImageResult {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("volume", target.String()))
	key := target.String() + " " + from + " " + img.Source.Checksum
	j := s.imports.Ensure(ctx, img.UID, key, from, func(ctx context.Context, j *providersdk.ImportJob) (string, error) {
		return target.String(), s.runImport(ctx, j, target, from, img.Source.Checksum)
	})
	return j.Result("volume "+target.String(), from, "libvirt at "+s.ep.safe)
}

// runImport downloads the image and uploads it, on a connection of its own so that a
// long upload neither waits for nor holds up the session's calls.
func (s *session) runImport(ctx context.Context, j *providersdk.ImportJob, target volumeRef, from, checksum string) error {
	f, err := os.CreateTemp("", "banlieue-image-")
	if err != nil {
		return fmt.Errorf("failed to make a temporary file: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()); _ = f.Close() }()
	// Downloading and uploading each count for half of the progress.
	size, err := j.Download(ctx, s.driver.httpClient, from, checksum, f, 2)
	if err != nil {
		return err
	}
	head := make([]byte, 4)
	_, _ = f.ReadAt(head, 0)
	format := "raw"
	if bytes.Equal(head, []byte{'Q', 'F', 'I', 0xfb}) {
		format = "qcow2"
	}
	l, err := s.dial()
	if err != nil {
		return err
	}
	defer s.close(l)
	stop := context.AfterFunc(ctx, func() { s.close(l) })
	defer stop()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return s.upload(l, target, j.Track(f), size, format)
}

// upload streams the image into "<volume>.part", then copies that to the volume.
func (s *session) upload(l *libvirt.Libvirt, target volumeRef, r io.Reader, size int64, format string) error {
	pool, err := l.StoragePoolLookupByName(target.pool)
	if err != nil {
		return s.fail("find storage pool "+target.pool, err)
	}
	part := target.name + ".part"
	if old, err := l.StorageVolLookupByName(pool, part); err == nil {
		_ = l.StorageVolDelete(old, 0)
	}
	spec := &libvirtxml.StorageVolume{
		Name:     part,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(size)},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	x, err := spec.Marshal()
	if err != nil {
		return err
	}
	vol, err := l.StorageVolCreateXML(pool, x, 0)
	if err != nil {
		return s.fail("create volume "+target.pool+"/"+part, err)
	}
	defer func() { _ = l.StorageVolDelete(vol, 0) }()
	if err := l.StorageVolUpload(vol, r, 0, uint64(size), 0); err != nil {
		return s.fail("upload the image", err)
	}
	// The upload replaced the file; its capacity is now the image's virtual size.
	if x, err = l.StorageVolGetXMLDesc(vol, 0); err != nil {
		return s.fail("read volume "+part, err)
	}
	uploaded := &libvirtxml.StorageVolume{}
	if err := uploaded.Unmarshal(x); err != nil || uploaded.Capacity == nil {
		return fmt.Errorf("failed to read the uploaded volume's size")
	}
	spec.Name, spec.Capacity = target.name, uploaded.Capacity
	if x, err = spec.Marshal(); err != nil {
		return err
	}
	if _, err := l.StorageVolCreateXMLFrom(pool, x, vol, 0); err != nil {
		return s.fail("copy the image to volume "+target.String(), err)
	}
	return nil
}
