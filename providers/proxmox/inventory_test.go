package proxmox

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

func TestInventory(t *testing.T) {
	domain := func(node string) banlieuev1.FailureDomain {
		return banlieuev1.FailureDomain{
			Name:   node,
			Labels: map[string]string{"node": node},
			Attributes: banlieuev1.FailureDomainAttributes{
				// ceph-rbd and vmbr9 exist nowhere, so their classes are absent.
				AvailableStorageClasses: []string{"fast"},
				AvailableNetworkClasses: []string{"prod"},
				Features:                []string{FeatureEFISecureBoot},
				Raw:                     map[string]string{"node": node},
			},
		}
	}
	tests := []struct {
		name    string
		offline string
		want    []banlieuev1.FailureDomain
	}{{
		name: "every online node is a failure domain with the classes whose storage and bridge it has",
		want: []banlieuev1.FailureDomain{domain(proxmoxtest.Node1), domain(proxmoxtest.Node2)},
	}, {
		name:    "an offline node is not a failure domain",
		offline: proxmoxtest.Node2,
		want:    []banlieuev1.FailureDomain{domain(proxmoxtest.Node1)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			if tt.offline != "" {
				if err := sim.SetNodeOnline(tt.offline, false); err != nil {
					t.Fatal(err)
				}
			}
			inv, err := connect(t, sim, NewDriver()).Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, inv.FailureDomains); diff != "" {
				t.Errorf("failure domains (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveImage(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, NewDriver())
	tests := []struct {
		name   string
		source banlieuev1.ImageSource
		want   providersdk.ImageResult
	}{{
		name:   "a template by VMID resolves to its node and VMID",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "9000"},
		want:   providersdk.ImageResult{Ready: true, ResolvedRef: "pve1/9000"},
	}, {
		name:   "a template by name resolves to its node and VMID",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: proxmoxtest.TemplateName},
		want:   providersdk.ImageResult{Ready: true, ResolvedRef: "pve1/9000"},
	}, {
		name:   "a missing template is not ready, with reason TemplateNotFound",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "debian-13"},
		want: providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason,
			Message: `template "debian-13" not found in Proxmox VE cluster banlieue`},
	}, {
		name:   "a VMID that is not a template is not ready",
		source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "9001"},
		want: providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason,
			Message: `template "9001" not found in Proxmox VE cluster banlieue`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ResolveImage(context.Background(), &providersdk.Image{Name: "ubuntu", Source: tt.source})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveImage (-want +got):\n%s", diff)
			}
		})
	}
}
