package proxmox

import (
	"context"
	"fmt"
	"strconv"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ResolveImage finds the image's template, by VMID or by name, with one
// /cluster/resources call, and resolves it to "<node>/<vmid>". Only Template sources
// are supported yet.
func (s *session) ResolveImage(ctx context.Context, img *providersdk.Image) (providersdk.ImageResult, error) {
	if img.Source.Kind != banlieuev1.ImageSourceTemplate {
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageUnsupportedSourceReason,
			Message: fmt.Sprintf("Proxmox VE images are templates; source kind %s is not supported yet", img.Source.Kind),
		}, nil
	}
	if img.Source.Ref == "" {
		return providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason, Message: "the image source names no template"}, nil
	}
	all, err := s.guests(ctx)
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	r, ok := findTemplate(all, img.Source.Ref)
	if !ok {
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageTemplateNotFoundReason,
			Message: fmt.Sprintf("template %q not found in Proxmox VE cluster %s", img.Source.Ref, s.cluster),
		}, nil
	}
	return providersdk.ImageResult{Ready: true, ResolvedRef: r.Node + "/" + strconv.Itoa(r.VMID)}, nil
}
