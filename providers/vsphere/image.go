package vsphere

import (
	"context"
	"fmt"
	"strings"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
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
		if from == "" {
			from = img.Source.Ref
		}
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

// findTemplate finds a template by inventory path (when ref holds a '/') or by name,
// in one inventory query. Of several templates with the name, the oldest (lowest
// managed object ID) is chosen, so the answer is stable.
func (s *session) findTemplate(ctx context.Context, ref string) (types.ManagedObjectReference, bool, error) {
	if strings.Contains(ref, "/") {
		obj, err := object.NewSearchIndex(s.vim).FindByInventoryPath(ctx, ref)
		if err != nil {
			return types.ManagedObjectReference{}, false, s.fail("find template "+ref, err)
		}
		if obj == nil || obj.Reference().Type != "VirtualMachine" {
			return types.ManagedObjectReference{}, false, nil
		}
		var vm mo.VirtualMachine
		err = property.DefaultCollector(s.vim).RetrieveOne(ctx, obj.Reference(), []string{"config.template"}, &vm)
		if err != nil {
			if fault.Is(err, &types.ManagedObjectNotFound{}) {
				return types.ManagedObjectReference{}, false, nil
			}
			return types.ManagedObjectReference{}, false, s.fail("read template "+ref, err)
		}
		return obj.Reference(), vm.Config != nil && vm.Config.Template, nil
	}
	vms, err := s.retrieveView(ctx, map[string][]string{"VirtualMachine": {"name", "config.template"}})
	if err != nil {
		return types.ManagedObjectReference{}, false, s.fail("find template "+ref, err)
	}
	var best *types.ManagedObjectReference
	for i := range vms {
		if vms[i].name != ref || vms[i].props["config.template"] != true {
			continue
		}
		if best == nil || morefLess(vms[i].ref, *best) {
			best = &vms[i].ref
		}
	}
	if best == nil {
		return types.ManagedObjectReference{}, false, nil
	}
	return *best, true, nil
}

// morefLess orders managed object IDs by age: vm-9 before vm-10.
func morefLess(a, b types.ManagedObjectReference) bool {
	if len(a.Value) != len(b.Value) {
		return len(a.Value) < len(b.Value)
	}
	return a.Value < b.Value
}
