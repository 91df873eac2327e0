package vsphere

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Feature names this driver reports in failure domains.
const (
	// FeatureEFISecureBoot is UEFI Secure Boot, which every vSphere since 6.5 supports.
	FeatureEFISecureBoot = "efiSecureBoot"
	// FeatureNestedVirtualization is hardware virtualization exposed to guests; reported
	// when every host of the cluster supports it.
	FeatureNestedVirtualization = "nestedVirtualization"
)

// Keys of class targets and of failure domains' raw attributes.
const (
	targetDatastore        = "datastore"
	targetDatastoreCluster = "datastoreCluster"
	targetNetwork          = "network"

	rawDatacenterPath = "datacenterPath"
	rawClusterPath    = "clusterPath"
	rawResourcePool   = "resourcePool"
)

// checkedFeatures are the features this driver detects itself; other features the
// Provider declares are passed through to every failure domain.
var checkedFeatures = []string{FeatureEFISecureBoot, FeatureNestedVirtualization}

// inventory is what one discovery found: the failure domains and where things are.
type inventory struct {
	domains []*failureDomain
	byName  map[string]*failureDomain
	byHost  map[types.ManagedObjectReference]*failureDomain
	// datacenters holds the names and inventory paths of every datacenter, with or
	// without clusters; datacenterNames are their names, sorted.
	datacenters     map[string]bool
	datacenterNames []string
}

// failureDomain is a compute cluster of a datacenter and what its hosts can reach.
type failureDomain struct {
	name           string
	datacenter     types.ManagedObjectReference
	datacenterName string
	datacenterPath string
	vmFolder       types.ManagedObjectReference
	cluster        types.ManagedObjectReference
	clusterName    string
	clusterPath    string
	resourcePool   types.ManagedObjectReference
	nestedHV       bool

	// datastores maps the names of the accessible datastores the cluster mounts to them.
	datastores map[string]datastoreInfo
	// pods maps datastore cluster names to the cluster's datastores in them.
	pods map[string][]datastoreInfo
	// networks maps the names of the cluster's networks to them.
	networks map[string]types.ManagedObjectReference
}

// datastoreInfo is a datastore and its free space when discovered.
type datastoreInfo struct {
	ref  types.ManagedObjectReference
	name string
	free int64
}

// entity is what discovery reads of every inventory object.
type entity struct {
	ref    types.ManagedObjectReference
	name   string
	parent *types.ManagedObjectReference
	props  map[string]any
}

// Inventory discovers the failure domains and what each offers.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	inv, err := s.discover(ctx)
	if err != nil {
		return providersdk.Inventory{}, err
	}
	if dc := s.params.datacenter; dc != "" && !inv.datacenters[dc] {
		// A misspelt datacenter would otherwise leave the Provider with no failure domain.
		return providersdk.Inventory{}, fmt.Errorf("spec.parameters.datacenter %q names no datacenter of vCenter %s; it has %s",
			dc, s.host, strings.Join(inv.datacenterNames, ", "))
	}
	if len(inv.domains) == 0 {
		// Placement takes a Provider without failure domains as one unnamed domain, for
		// providers that report none; a VM placed there would fail for want of a cluster.
		where := "vCenter " + s.host
		if dc := s.params.datacenter; dc != "" {
			where = fmt.Sprintf("datacenter %q of vCenter %s", dc, s.host)
		}
		return providersdk.Inventory{}, fmt.Errorf("%s has no compute cluster, which is where banlieue places VMs; "+
			"create one, or set spec.parameters.datacenter to a datacenter that has one", where)
	}
	out := providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{}}
	for _, fd := range inv.domains {
		out.FailureDomains = append(out.FailureDomains, s.describe(fd))
	}
	return out, nil
}

// describe turns a failure domain into the Provider status's form.
func (s *session) describe(fd *failureDomain) banlieuev1.FailureDomain {
	attrs := banlieuev1.FailureDomainAttributes{
		AvailableStorageClasses: []string{},
		AvailableNetworkClasses: []string{},
		Features:                []string{FeatureEFISecureBoot},
		Raw: map[string]string{
			rawDatacenterPath: fd.datacenterPath,
			rawClusterPath:    fd.clusterPath,
			rawResourcePool:   fd.resourcePool.Value,
		},
	}
	for _, c := range s.storageClasses {
		if _, ok, _ := fd.storageTarget(c.target); ok {
			attrs.AvailableStorageClasses = append(attrs.AvailableStorageClasses, c.name)
		}
	}
	for _, c := range s.networkClasses {
		if name, ok := c.target[targetNetwork]; !ok || fd.networks[name] != (types.ManagedObjectReference{}) {
			attrs.AvailableNetworkClasses = append(attrs.AvailableNetworkClasses, c.name)
		}
	}
	if fd.nestedHV {
		attrs.Features = append(attrs.Features, FeatureNestedVirtualization)
	}
	for _, f := range s.features {
		if !slices.Contains(checkedFeatures, f) && !slices.Contains(attrs.Features, f) {
			attrs.Features = append(attrs.Features, f)
		}
	}
	return banlieuev1.FailureDomain{
		Name:       fd.name,
		Labels:     map[string]string{"dc": providersdk.LabelValue(fd.datacenterName), "cluster": providersdk.LabelValue(fd.clusterName)},
		Attributes: attrs,
	}
}

// storageTarget picks the datastore a storage class target names in this failure
// domain: its datastore, or the emptiest datastore of its datastore cluster. ok is false
// when the target names storage the cluster cannot reach; a target without a vSphere key
// is ok with no datastore.
func (fd *failureDomain) storageTarget(target map[string]string) (datastoreInfo, bool, string) {
	if name, ok := target[targetDatastore]; ok {
		ds, found := fd.datastores[name]
		return ds, found, "datastore " + quote(name)
	}
	if name, ok := target[targetDatastoreCluster]; ok {
		members := fd.pods[name]
		if len(members) == 0 {
			return datastoreInfo{}, false, "datastore cluster " + quote(name)
		}
		best := members[0]
		for _, ds := range members[1:] {
			if ds.free > best.free {
				best = ds
			}
		}
		return best, true, "datastore cluster " + quote(name)
	}
	return datastoreInfo{}, true, ""
}

// domains returns the cached inventory, discovering it when there is none or when
// refresh is true.
func (s *session) domains(ctx context.Context, refresh bool) (*inventory, error) {
	s.mu.Lock()
	inv := s.inventory
	s.mu.Unlock()
	if inv != nil && !refresh {
		return inv, nil
	}
	return s.discover(ctx)
}

// discover reads the datacenters, clusters, datastores and networks in one property
// collector call through a container view, and caches what it found.
func (s *session) discover(ctx context.Context) (*inventory, error) {
	objs, err := s.retrieveView(ctx, map[string][]string{
		"Datacenter":                  {"name", "parent", "vmFolder"},
		"Folder":                      {"name", "parent"},
		"StoragePod":                  {"name", "parent", "childEntity"},
		"ClusterComputeResource":      {"name", "parent", "resourcePool", "datastore", "network", "host"},
		"HostSystem":                  {"capability.nestedHVSupported"},
		"Datastore":                   {"name", "summary.accessible", "summary.freeSpace"},
		"Network":                     {"name"},
		"DistributedVirtualPortgroup": {"name"},
		"OpaqueNetwork":               {"name"},
	})
	if err != nil {
		return nil, s.fail("discover the vCenter inventory", err)
	}
	byRef := map[types.ManagedObjectReference]*entity{}
	for i := range objs {
		byRef[objs[i].ref] = &objs[i]
	}

	inv := &inventory{byName: map[string]*failureDomain{}, byHost: map[types.ManagedObjectReference]*failureDomain{}, datacenters: map[string]bool{}}
	for i := range objs {
		if dc := &objs[i]; dc.ref.Type == "Datacenter" {
			inv.datacenters[dc.name], inv.datacenters[inventoryPath(byRef, dc)] = true, true
			inv.datacenterNames = append(inv.datacenterNames, dc.name)
		}
	}
	slices.Sort(inv.datacenterNames)
	for i := range objs {
		c := &objs[i]
		if c.ref.Type != "ClusterComputeResource" {
			continue
		}
		dc := datacenterOf(byRef, c)
		if dc == nil {
			continue
		}
		fd := &failureDomain{
			datacenter:     dc.ref,
			datacenterName: dc.name,
			datacenterPath: inventoryPath(byRef, dc),
			cluster:        c.ref,
			clusterName:    c.name,
			clusterPath:    inventoryPath(byRef, c),
			datastores:     map[string]datastoreInfo{},
			pods:           map[string][]datastoreInfo{},
			networks:       map[string]types.ManagedObjectReference{},
		}
		if s.params.datacenter != "" && s.params.datacenter != fd.datacenterName && s.params.datacenter != fd.datacenterPath {
			continue
		}
		if ref, ok := dc.props["vmFolder"].(types.ManagedObjectReference); ok {
			fd.vmFolder = ref
		}
		if ref, ok := c.props["resourcePool"].(types.ManagedObjectReference); ok {
			fd.resourcePool = ref
		}
		for _, ref := range refs(c.props["datastore"]) {
			if ds := byRef[ref]; ds != nil && ds.props["summary.accessible"] != false {
				free, _ := ds.props["summary.freeSpace"].(int64)
				fd.datastores[ds.name] = datastoreInfo{ref: ref, name: ds.name, free: free}
			}
		}
		for _, ref := range refs(c.props["network"]) {
			if n := byRef[ref]; n != nil {
				fd.networks[n.name] = ref
			}
		}
		hosts := refs(c.props["host"])
		fd.nestedHV = len(hosts) > 0
		for _, h := range hosts {
			inv.byHost[h] = fd
			if hs := byRef[h]; hs == nil || hs.props["capability.nestedHVSupported"] != true {
				fd.nestedHV = false
			}
		}
		inv.domains = append(inv.domains, fd)
	}
	for i := range objs {
		pod := &objs[i]
		if pod.ref.Type != "StoragePod" {
			continue
		}
		dc := datacenterOf(byRef, pod)
		for _, fd := range inv.domains {
			if dc == nil || fd.datacenter != dc.ref {
				continue
			}
			for _, child := range refs(pod.props["childEntity"]) {
				for _, ds := range fd.datastores {
					if ds.ref == child {
						fd.pods[pod.name] = append(fd.pods[pod.name], ds)
					}
				}
			}
		}
	}
	nameDomains(inv)
	s.mu.Lock()
	s.inventory = inv
	s.mu.Unlock()
	return inv, nil
}

// nameDomains gives every failure domain its name, in inventory-path order so that a
// clash is always resolved the same way.
func nameDomains(inv *inventory) {
	sort.Slice(inv.domains, func(i, j int) bool {
		a, b := inv.domains[i], inv.domains[j]
		if a.datacenterPath != b.datacenterPath {
			return a.datacenterPath < b.datacenterPath
		}
		return a.clusterPath < b.clusterPath
	})
	for _, fd := range inv.domains {
		name := providersdk.DNSLabel(fd.datacenterName+"-"+fd.clusterName, "default")
		if _, clash := inv.byName[name]; clash {
			sum := sha256.Sum256([]byte(fd.cluster.Value))
			name = strings.TrimRight(truncate(name, 63-9), "-.") + "-" + hex.EncodeToString(sum[:4])
		}
		fd.name = name
		inv.byName[name] = fd
	}
	sort.Slice(inv.domains, func(i, j int) bool { return inv.domains[i].name < inv.domains[j].name })
}

// retrieveView reads the given properties of every object of the given types in the
// whole inventory, in one call.
func (s *session) retrieveView(ctx context.Context, kinds map[string][]string) ([]entity, error) {
	objs, err := s.retrieveIn(ctx, s.vim.ServiceContent.RootFolder, kinds)
	if err != nil {
		return nil, err
	}
	out := make([]entity, 0, len(objs))
	for _, oc := range objs {
		e := entity{ref: oc.Obj, props: map[string]any{}}
		for _, p := range oc.PropSet {
			e.props[p.Name] = p.Val
		}
		e.name, _ = e.props["name"].(string)
		if p, ok := e.props["parent"].(types.ManagedObjectReference); ok {
			e.parent = &p
		}
		out = append(out, e)
	}
	return out, nil
}

// retrieveIn reads the given properties of every object of the given types under
// container (a folder or a datacenter, recursively) through a container view, in one
// property collector call (continued when vCenter pages a large answer).
func (s *session) retrieveIn(ctx context.Context, container types.ManagedObjectReference, kinds map[string][]string) ([]types.ObjectContent, error) {
	kindList := make([]string, 0, len(kinds))
	for k := range kinds {
		kindList = append(kindList, k)
	}
	sort.Strings(kindList)
	v, err := view.NewManager(s.vim).CreateContainerView(ctx, container, kindList, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = v.Destroy(context.WithoutCancel(ctx)) }()

	spec := types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{
			Obj:       v.Reference(),
			Skip:      types.NewBool(true),
			SelectSet: []types.BaseSelectionSpec{&types.TraversalSpec{Type: "ContainerView", Path: "view"}},
		}},
	}
	for _, k := range kindList {
		spec.PropSet = append(spec.PropSet, types.PropertySpec{Type: k, PathSet: kinds[k]})
	}
	res, err := property.DefaultCollector(s.vim).RetrieveProperties(ctx, types.RetrieveProperties{SpecSet: []types.PropertyFilterSpec{spec}})
	if err != nil {
		return nil, err
	}
	return res.Returnval, nil
}

// refs returns the references of an ArrayOfManagedObjectReference property.
func refs(v any) []types.ManagedObjectReference {
	if a, ok := v.(types.ArrayOfManagedObjectReference); ok {
		return a.ManagedObjectReference
	}
	return nil
}

// datacenterOf walks up from e to its datacenter.
func datacenterOf(byRef map[types.ManagedObjectReference]*entity, e *entity) *entity {
	for e != nil && e.parent != nil {
		e = byRef[*e.parent]
		if e != nil && e.ref.Type == "Datacenter" {
			return e
		}
	}
	return nil
}

// inventoryPath is e's inventory path, as SearchIndex.FindByInventoryPath reads it:
// names from the root folder down, '/' in names escaped as %2f.
func inventoryPath(byRef map[types.ManagedObjectReference]*entity, e *entity) string {
	var parts []string
	for e != nil {
		if e.parent == nil {
			break // the root folder has no name in paths
		}
		parts = append(parts, strings.ReplaceAll(e.name, "/", "%2f"))
		e = byRef[*e.parent]
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// quote quotes s for a message.
func quote(s string) string { return `"` + s + `"` }
