package vsphere

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

func TestResolveImage(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	host := strings.TrimSuffix(strings.TrimPrefix(sim.URL, "https://"), "/sdk")
	tests := []struct {
		name   string
		source banlieuev1.ImageSource
		want   providersdk.ImageResult
	}{{
		name:   "a template found by name is ready, resolved to its managed object ID",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: vspheretest.TemplateName},
		want:   providersdk.ImageResult{Ready: true, ResolvedRef: sim.TemplateRef},
	}, {
		name:   "a template found by inventory path is ready",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "/DC0/vm/" + vspheretest.TemplateName},
		want:   providersdk.ImageResult{Ready: true, ResolvedRef: sim.TemplateRef},
	}, {
		name:   "a missing template is not ready, with a message naming it and vCenter",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "debian-13"},
		want:   providersdk.ImageResult{Reason: "TemplateNotFound", Message: `template "debian-13" not found in vCenter ` + host},
	}, {
		name:   "a VM that is not a template does not count",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "DC0_H0_VM0"},
		want:   providersdk.ImageResult{Reason: "TemplateNotFound", Message: `template "DC0_H0_VM0" not found in vCenter ` + host},
	}, {
		name:   "a path to a VM that is not a template does not count",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "/DC0/vm/DC0_H0_VM0"},
		want:   providersdk.ImageResult{Reason: "TemplateNotFound", Message: `template "/DC0/vm/DC0_H0_VM0" not found in vCenter ` + host},
	}, {
		name:   "a backing file has no meaning on vSphere",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceBackingFile, Ref: "[LocalDS_0] disk.vmdk"},
		want:   providersdk.ImageResult{Reason: "UnsupportedSource", Message: "vSphere images are templates; source kind BackingFile is not supported"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ResolveImage(context.Background(), &providersdk.Image{Name: "ubuntu", UID: "img-1", Source: tt.source})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveImage (-want +got):\n%s", diff)
			}
		})
	}
}
