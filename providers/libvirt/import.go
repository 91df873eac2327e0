package libvirt

import (
	"context"
	"fmt"
	"io"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// importImage starts, or reports, the import of img from the URL from into the volume
// target: downloaded (checking the checksum) to a temporary file, then uploaded by the
// host, so the volume only ever exists complete.
func (s *session) importImage(ctx context.Context, img *providersdk.Image, target host.VolumeRef, from string) providersdk.ImageResult {
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("volume", target.String()))
	key := target.String() + " " + from + " " + img.Source.Checksum
	j := s.imports.Ensure(ctx, img.UID, key, from, func(ctx context.Context, j *providersdk.ImportJob) (string, error) {
		return target.String(), s.runImport(ctx, j, target, from, img.Source.Checksum)
	})
	return j.Result("volume "+target.String(), from, "libvirt at "+s.host.URI())
}

// runImport downloads the image to a temporary file and has the host upload it.
func (s *session) runImport(ctx context.Context, j *providersdk.ImportJob, target host.VolumeRef, from, checksum string) error {
	f, err := os.CreateTemp("", "banlieue-image-")
	if err != nil {
		return fmt.Errorf("failed to make a temporary file: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()); _ = f.Close() }()
	// Downloading and uploading each count for half of the progress.
	size, err := j.Download(ctx, from, checksum, f, 2)
	if err != nil {
		return err
	}
	head := make([]byte, 4)
	_, _ = f.ReadAt(head, 0)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("failed to read the downloaded image: %w", err)
	}
	return s.host.Import(ctx, target, j.Track(f), size, host.DetectFormat(head))
}
