package proxmox

import (
	"context"
	"fmt"
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
	nodes, err := s.clusterNodes(ctx)
	if err != nil {
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
	if err := s.checkNodeParameter(nodes); err != nil {
		return providersdk.Inventory{}, err
	}
	out := providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{}}
	for _, n := range nodes {
		if !n.online() || (len(s.nodes) > 0 && !slices.Contains(s.nodes, n.Node)) {
			continue
		}
		bridges, err := s.bridges(ctx, n.Node)
		if err != nil {
			return providersdk.Inventory{}, err
		}
		has := map[string]map[string]bool{targetStorage: {}, targetBridge: {}}
		for _, st := range storages {
			if st.Node == n.Node && st.Status == "available" {
				has[targetStorage][st.Storage] = true
			}
		}
		for _, b := range bridges {
			has[targetBridge][b] = true
		}
		out.FailureDomains = append(out.FailureDomains, s.describe(n.Node, has))
	}
	if len(out.FailureDomains) == 0 {
		// Placement takes a Provider without failure domains as one unnamed domain, for
		// providers that report none; a VM placed there would fail for want of a node.
		var offline []string
		for _, n := range nodes {
			if len(s.nodes) == 0 || slices.Contains(s.nodes, n.Node) {
				offline = append(offline, n.Node)
			}
		}
		slices.Sort(offline)
		return providersdk.Inventory{}, fmt.Errorf("no node this Provider may use is online in Proxmox VE cluster %s (%s offline); "+
			"VMs are placed here again once one is", s.cluster, strings.Join(offline, ", "))
	}
	slices.SortFunc(out.FailureDomains, func(a, b banlieuev1.FailureDomain) int {
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// checkNodeParameter fails when the Provider's node parameter names nodes and none of
// them is a node of the cluster, which is a mistake in the Provider, not an outage:
// a misspelt node would otherwise leave the Provider with no failure domain.
func (s *session) checkNodeParameter(nodes []clusterNode) error {
	if len(s.nodes) == 0 {
		return nil
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if slices.Contains(s.nodes, n.Node) {
			return nil
		}
		names = append(names, n.Node)
	}
	slices.Sort(names)
	return fmt.Errorf("spec.parameters.%s %q names no node of Proxmox VE cluster %s; its nodes are %s",
		ParamNode, strings.Join(s.nodes, ","), s.cluster, strings.Join(names, ", "))
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

// pickStorage is param, the Provider's choice, when set, else the node's first
// enabled storage for content (snippets, import, images) in PVE's order, shared ones
// first when preferShared; "" when the node has none.
func (s *session) pickStorage(ctx context.Context, node, content, param string, preferShared bool) (string, error) {
	if param != "" {
		return param, nil
	}
	var storages []struct {
		Storage string `json:"storage"`
		Shared  int    `json:"shared"`
	}
	if err := s.get(ctx, "/nodes/"+node+"/storage", map[string]string{"content": content, "enabled": "1"}, &storages); err != nil {
		return "", s.refused("list the storages of node "+node, err)
	}
	if len(storages) == 0 {
		return "", nil
	}
	best := storages[0]
	for _, st := range storages {
		if preferShared && st.Shared > best.Shared {
			best = st
			break
		}
	}
	return best.Storage, nil
}

// bridges lists a node's Linux and OVS bridges by name.
func (s *session) bridges(ctx context.Context, node string) ([]string, error) {
	var ifaces []struct {
		Iface string `json:"iface"`
	}
	if err := s.get(ctx, "/nodes/"+node+"/network", map[string]string{"type": "any_bridge"}, &ifaces); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ifaces))
	for _, i := range ifaces {
		names = append(names, i.Iface)
	}
	slices.Sort(names)
	return names, nil
}

// clusterNode is a node as /cluster/resources lists it.
type clusterNode struct {
	Node   string `json:"node"`
	Status string `json:"status"`
}

// online reports whether the cluster sees the node online.
func (n clusterNode) online() bool { return n.Status == "online" }

// clusterNodes lists the cluster's nodes in one call.
func (s *session) clusterNodes(ctx context.Context) ([]clusterNode, error) {
	var nodes []clusterNode
	if err := s.get(ctx, "/cluster/resources", map[string]string{"type": "node"}, &nodes); err != nil {
		return nil, err
	}
	return nodes, nil
}
