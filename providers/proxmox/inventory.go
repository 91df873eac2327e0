package proxmox

import (
	"context"
	"slices"
	"strings"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// FeatureEFISecureBoot is UEFI Secure Boot, which every PVE node offers: OVMF with
// pre-enrolled keys ships with qemu-server.
const FeatureEFISecureBoot = "efiSecureBoot"

// LabelNode is the failure domain label that holds the node's name.
const LabelNode = "node"

// Inventory reports one failure domain per online node (of the Provider's node
// parameter, when set), with the storage and network classes whose storage and bridge
// that node has. It reads nodes and storages in two cluster-wide calls, then each
// node's bridges.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := s.get(ctx, "/cluster/resources", map[string]string{"type": "node"}, &nodes); err != nil {
		return providersdk.Inventory{}, err
	}
	var storages []struct {
		Node    string `json:"node"`
		Storage string `json:"storage"`
		Status  string `json:"status"`
	}
	if err := s.get(ctx, "/cluster/resources", map[string]string{"type": "storage"}, &storages); err != nil {
		return providersdk.Inventory{}, err
	}
	out := providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{}}
	for _, n := range nodes {
		if n.Status != "online" || (len(s.nodes) > 0 && !slices.Contains(s.nodes, n.Node)) {
			continue
		}
		var ifaces []struct {
			Iface string `json:"iface"`
		}
		if err := s.get(ctx, "/nodes/"+n.Node+"/network", map[string]string{"type": "any_bridge"}, &ifaces); err != nil {
			return providersdk.Inventory{}, err
		}
		has := map[string]map[string]bool{targetStorage: {}, targetBridge: {}}
		for _, st := range storages {
			if st.Node == n.Node && st.Status == "available" {
				has[targetStorage][st.Storage] = true
			}
		}
		for _, i := range ifaces {
			has[targetBridge][i.Iface] = true
		}
		out.FailureDomains = append(out.FailureDomains, s.describe(n.Node, has))
	}
	slices.SortFunc(out.FailureDomains, func(a, b banlieuev1.FailureDomain) int {
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// describe is a node's failure domain: the classes whose targets it has (a class with
// no storage or bridge key is available everywhere) and the features.
func (s *session) describe(node string, has map[string]map[string]bool) banlieuev1.FailureDomain {
	attrs := banlieuev1.FailureDomainAttributes{
		AvailableStorageClasses: available(s.storageClasses, targetStorage, has),
		AvailableNetworkClasses: available(s.networkClasses, targetBridge, has),
		Features:                []string{FeatureEFISecureBoot},
		Raw:                     map[string]string{LabelNode: node},
	}
	for _, f := range s.features {
		if !slices.Contains(attrs.Features, f) {
			attrs.Features = append(attrs.Features, f)
		}
	}
	return banlieuev1.FailureDomain{Name: node, Labels: map[string]string{LabelNode: node}, Attributes: attrs}
}

// available lists the classes whose target under key the node has.
func available(classes []classTarget, key string, has map[string]map[string]bool) []string {
	out := []string{}
	for _, c := range classes {
		if name, ok := c.target[key]; !ok || has[key][name] {
			out = append(out, c.name)
		}
	}
	return out
}
