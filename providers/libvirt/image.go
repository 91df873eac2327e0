package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// ResolveImage finds the image's volume and reports it as "<pool>/<volume>".
//
// A BackingFile source's ref names an existing volume, as "<pool>/<volume>" or an
// absolute path; with importFrom, a missing "<pool>/<volume>" is imported. A Url source
// (importFrom) is imported into the image pool as "<VMImage name>-<checksum
// prefix>", so a changed checksum imports anew and a finished import is found, not
// repeated. Imports run in the background; later calls report their progress.
func (s *session) ResolveImage(ctx context.Context, img *providersdk.Image) (providersdk.ImageResult, error) {
	src := img.Source
	var target host.VolumeRef
	from := src.ImportFrom
	switch src.Kind {
	case banlieuev1.ImageSourceBackingFile:
		if src.Ref == "" {
			return notFound("the image source names no volume"), nil
		}
		resolved, found, err := s.resolveVolume(ctx, src.Ref)
		if err != nil || found {
			return s.resolved(img, resolved, found, err)
		}
		pool, name, ok := strings.Cut(src.Ref, "/")
		if from == "" || !ok || pool == "" || name == "" || strings.Contains(name, "/") {
			return notFound(fmt.Sprintf("volume %q does not exist on libvirt host %s", src.Ref, s.host.URI())), nil
		}
		target = host.VolumeRef{Pool: pool, Name: name}
	case banlieuev1.ImageSourceURL:
		if from == "" {
			return notFound("the image source names no URL"), nil
		}
		target = host.VolumeRef{Pool: s.imagePool(), Name: imageVolumeName(img.Name, src.Checksum)}
		resolved, found, err := s.resolveVolume(ctx, target.String())
		if err != nil || found {
			return s.resolved(img, resolved, found, err)
		}
	default:
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageUnsupportedSourceReason,
			Message: fmt.Sprintf("libvirt images are volumes; source kind %s is not supported", src.Kind),
		}, nil
	}
	return s.importImage(ctx, img, target, from), nil
}

// resolved is the row of an image whose volume was looked up.
func (s *session) resolved(img *providersdk.Image, ref string, found bool, err error) (providersdk.ImageResult, error) {
	if found {
		s.imports.Forget(img.UID)
	}
	return providersdk.ImageResult{Ready: found, ResolvedRef: ref}, err
}

// notFound is the row of an image whose volume is missing.
func notFound(msg string) providersdk.ImageResult {
	return providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason, Message: msg}
}

// imagePool is where images are imported: the imagePool parameter, else the pool one.
func (s *session) imagePool() string {
	if p := s.params[ParamImagePool]; p != "" {
		return p
	}
	return s.defaultPool()
}

// imageVolumeName is the volume a Url image is imported as: the VMImage's name and,
// when the source has a checksum, the first 12 hex digits of its SHA-256.
func imageVolumeName(name, checksum string) string {
	if checksum == "" {
		return "banlieue-image-" + name
	}
	sum := sha256.Sum256([]byte(checksum))
	return "banlieue-image-" + name + "-" + hex.EncodeToString(sum[:6])
}

// resolveVolume finds a volume by "<pool>/<volume>" or path and returns it as
// "<pool>/<volume>"; a reference of neither form names no volume.
func (s *session) resolveVolume(ctx context.Context, ref string) (string, bool, error) {
	vol, err := s.host.LookupVolume(ctx, ref)
	if host.IsNotFound(err) || errors.Is(err, host.ErrInvalidRef) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return vol.Ref().String(), true, nil
}
