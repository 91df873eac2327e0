package proxmox

import (
	"context"
	"fmt"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ResolveImage resolves the image to its template's "<node>/<vmid>". A Template
// source's template is found by VMID or by name with one listing of the cluster's guests; when
// it is missing and the source has importFrom, or for a Url source, the image is
// imported as a template, one step a call (see importImage).
func (s *session) ResolveImage(ctx context.Context, img *providersdk.Image) (providersdk.ImageResult, error) {
	switch img.Source.Kind {
	case banlieuev1.ImageSourceTemplate:
	case banlieuev1.ImageSourceURL:
		return s.importImage(ctx, img, img.Source.Ref)
	default:
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageUnsupportedSourceReason,
			Message: fmt.Sprintf("Proxmox VE images are templates, found or imported from a URL; source kind %s is not supported", img.Source.Kind),
		}, nil
	}
	if img.Source.Ref == "" {
		return providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason, Message: "the image source names no template"}, nil
	}
	all, err := s.api.Resources(ctx)
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	r, ok := findTemplate(all, img.Source.Ref)
	switch {
	case ok:
		return providersdk.ImageResult{Ready: true, ResolvedRef: resolvedRef(r)}, nil
	case img.Source.ImportFrom != "":
		return s.importImage(ctx, img, img.Source.Ref)
	}
	return providersdk.ImageResult{
		Reason:  banlieuev1.ImageTemplateNotFoundReason,
		Message: fmt.Sprintf("template %q not found in Proxmox VE cluster %s", img.Source.Ref, s.cluster),
	}, nil
}
