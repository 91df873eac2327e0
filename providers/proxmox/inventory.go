package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// FeatureEFISecureBoot is UEFI Secure Boot, which every PVE node offers: OVMF with
// pre-enrolled keys ships with qemu-server.
const FeatureEFISecureBoot = "efiSecureBoot"

// LabelNode is the failure domain label that holds the node's name.
const LabelNode = "node"

// Inventory reports one failure domain per online node (of the Provider's node
// parameter, when set), with the storage and network classes whose storage and bridge
// that node has. It reads nodes and storages in two cluster-wide calls, then each
// node's bridges. Hotplug parameters that do not parse fail it, so the Provider says
// what to fix.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	if s.hotplugErr != nil {
		return providersdk.Inventory{}, s.hotplugErr
	}
	nodes, err := s.api.Nodes(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	s.learnNodeCPUs(nodes)
	storages, err := s.api.StorageResources(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	if err := s.checkNodeParameter(nodes); err != nil {
		return providersdk.Inventory{}, err
	}
	out := providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{}}
	for _, n := range nodes {
		if !n.Online || (len(s.nodes) > 0 && !slices.Contains(s.nodes, n.Name)) {
			continue
		}
		bridges, err := s.api.Bridges(ctx, n.Name)
		if err != nil {
			return providersdk.Inventory{}, err
		}
		has := map[string]map[string]bool{targetStorage: {}, targetBridge: {}}
		for _, st := range storages {
			if st.Node == n.Name && st.Available {
				has[targetStorage][st.Storage] = true
			}
		}
		for _, b := range bridges {
			has[targetBridge][b] = true
		}
		out.FailureDomains = append(out.FailureDomains, s.describe(n.Name, has))
	}
	if len(out.FailureDomains) == 0 {
		// Placement takes a Provider without failure domains as one unnamed domain, for
		// providers that report none; a VM placed there would fail for want of a node.
		var offline []string
		for _, n := range nodes {
			if len(s.nodes) == 0 || slices.Contains(s.nodes, n.Name) {
				offline = append(offline, n.Name)
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
func (s *session) checkNodeParameter(nodes []pve.Node) error {
	if len(s.nodes) == 0 {
		return nil
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if slices.Contains(s.nodes, n.Name) {
			return nil
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return fmt.Errorf("spec.parameters.%s %q names no node of Proxmox VE cluster %s; its nodes are %s",
		ParamNode, strings.Join(s.nodes, ","), s.cluster, strings.Join(names, ", "))
}

// describe is a node's failure domain: the classes whose targets it has (a class with
// no storage or bridge key is available everywhere) and the features.
func (s *session) describe(node string, has map[string]map[string]bool) banlieuev1.FailureDomain {
	attrs := banlieuev1.FailureDomainAttributes{
		AvailableStorageClasses: providersdk.AvailableClasses(s.storageClasses, targetOn(targetStorage, has)),
		AvailableNetworkClasses: providersdk.AvailableClasses(s.networkClasses, targetOn(targetBridge, has)),
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

// targetOn tells whether a class's target under key (a storage, a bridge) is among
// the node's: a target without the key is everywhere.
func targetOn(key string, has map[string]map[string]bool) func(target map[string]string) bool {
	return func(target map[string]string) bool {
		name, ok := target[key]
		return !ok || has[key][name]
	}
}

// pickStorage is param, the Provider's choice, when set, else the node's first
// enabled storage for content (snippets, import, images) in PVE's order, shared ones
// first when preferShared; "" when the node has none.
func (s *session) pickStorage(ctx context.Context, node, content, param string, preferShared bool) (string, error) {
	if param != "" {
		return param, nil
	}
	storages, err := s.api.Storages(ctx, node, content)
	if err != nil {
		return "", pve.Refused("list the storages of node "+node, err)
	}
	if len(storages) == 0 {
		return "", nil
	}
	best := storages[0]
	if preferShared && !best.Shared {
		if i := slices.IndexFunc(storages, func(st pve.Storage) bool { return st.Shared }); i >= 0 {
			best = storages[i]
		}
	}
	return best.Name, nil
}

// bridges lists a node's Linux and OVS bridges, by name.
func (s *session) bridges(ctx context.Context, node string) ([]string, error) {
	names, err := s.api.Bridges(ctx, node)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}
