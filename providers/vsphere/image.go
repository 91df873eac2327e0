package vsphere

import (
	"context"
	"fmt"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// ResolveImage finds the image's template by name (or inventory path) and reports its
// managed object ID. When the template is missing and the source names importFrom, the
// OVA or OVF there is imported as the template in the background; later calls report
// its progress and, once it is there, the template.
func (s *session) ResolveImage(ctx context.Context, img *providersdk.Image) (providersdk.ImageResult, error) {
	name, from := img.Source.Ref, img.Source.ImportFrom
	switch img.Source.Kind {
	case banlieuev1.ImageSourceTemplate:
	case banlieuev1.ImageSourceURL:
		// A URL source is imported as a template named after the VMImage.
		name = img.Name
	default:
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageUnsupportedSourceReason,
			Message: fmt.Sprintf("vSphere images are templates; source kind %s is not supported", img.Source.Kind),
		}, nil
	}
	if name == "" {
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageTemplateNotFoundReason,
			Message: "the image source names no template",
		}, nil
	}
	ref, found, err := s.findTemplate(ctx, name)
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	if found {
		s.imports.Forget(img.UID)
		return providersdk.ImageResult{Ready: true, ResolvedRef: ref.Value}, nil
	}
	if from != "" {
		return s.importTemplate(ctx, img, name, from), nil
	}
	return providersdk.ImageResult{
		Reason:  banlieuev1.ImageTemplateNotFoundReason,
		Message: fmt.Sprintf("template %q not found in vCenter %s", name, s.host),
	}, nil
}

// findTemplate finds a template by name or inventory path (of several with the name,
// the oldest); found is false when there is none.
func (s *session) findTemplate(ctx context.Context, ref string) (tmpl vcenter.Ref, found bool, err error) {
	tmpl, err = s.vc.FindTemplate(ctx, ref)
	if vcenter.IsNotFound(err) {
		return vcenter.Ref{}, false, nil
	}
	return tmpl, err == nil, err
}
