package proxmox

import (
	"context"
	"strings"
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
		name string
		// offline are the comma-separated nodes taken offline.
		offline string
		want    []banlieuev1.FailureDomain
		wantErr string
	}{{
		name: "every online node is a failure domain with the classes whose storage and bridge it has",
		want: []banlieuev1.FailureDomain{domain(proxmoxtest.Node1), domain(proxmoxtest.Node2)},
	}, {
		name:    "an offline node is not a failure domain",
		offline: proxmoxtest.Node2,
		want:    []banlieuev1.FailureDomain{domain(proxmoxtest.Node1)},
	}, {
		// Placement would take a Provider without failure domains as one unnamed domain
		// and place VMs there, which would then fail for want of a node.
		name:    "with every node offline the inventory fails, so the Provider is not Ready",
		offline: proxmoxtest.Node1 + "," + proxmoxtest.Node2,
		wantErr: "no node this Provider may use is online in Proxmox VE cluster " + proxmoxtest.Cluster + " (pve1, pve2 offline); VMs are placed here again once one is",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			for _, n := range strings.Split(tt.offline, ",") {
				if n == "" {
					continue
				}
				if err := sim.SetNodeOnline(n, false); err != nil {
					t.Fatal(err)
				}
			}
			inv, err := connect(t, sim, NewDriver()).Inventory(context.Background())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Inventory error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, inv.FailureDomains); diff != "" {
				t.Errorf("failure domains (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInventoryFailsWhenTheNodeParameterNamesNoNode(t *testing.T) {
	sim := proxmoxtest.Start(t)
	tests := []struct {
		name, nodes string
		// want is the error, or "" for an inventory with the failure domains wantNodes.
		want      string
		wantNodes []string
	}{{
		name:  "a node that does not exist is an error naming the cluster's nodes",
		nodes: "pve9",
		want:  `spec.parameters.node "pve9" names no node of Proxmox VE cluster ` + proxmoxtest.Cluster + "; its nodes are pve1, pve2",
	}, {
		name:      "a list with one node that exists leaves out the one that does not",
		nodes:     "pve9, pve2",
		wantNodes: []string{proxmoxtest.Node2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := connect(t, sim, NewDriver())
			s.nodes = strings.Split(strings.ReplaceAll(tt.nodes, " ", ""), ",")
			inv, err := s.Inventory(context.Background())
			if tt.want != "" {
				if err == nil || err.Error() != tt.want {
					t.Fatalf("Inventory error %v, want %q", err, tt.want)
				}
				if providersdk.IsClassified(err) {
					t.Errorf("error %v is classified; the Provider controller reports an unclassified Inventory error as InventoryFailed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fd := range inv.FailureDomains {
				got = append(got, fd.Name)
			}
			if diff := cmp.Diff(tt.wantNodes, got); diff != "" {
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
