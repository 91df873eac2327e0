package vcenter

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/types"
)

// Inventory is what one discovery of vCenter's inventory found.
type Inventory struct {
	// Datacenters are every datacenter, with or without clusters.
	Datacenters []Datacenter
	// Clusters are every compute cluster that is in a datacenter.
	Clusters []Cluster
	// StoragePods are every datastore cluster that is in a datacenter.
	StoragePods []StoragePod
	// Datastores are every datastore, by reference.
	Datastores map[Ref]Datastore
	// Networks are every standard port group, distributed port group and opaque
	// network, by reference.
	Networks map[Ref]Network
	// NestedHV holds the hosts whose hardware virtualization can be exposed to guests.
	NestedHV map[Ref]bool
	// Usable holds the hosts that can take a new VM: connected and not in maintenance
	// mode.
	Usable map[Ref]bool
	// HostDatastores are the datastores each host mounts.
	HostDatastores map[Ref][]Ref
}

// Datacenter is one datacenter.
type Datacenter struct {
	// Ref is the datacenter.
	Ref Ref
	// Name is its name and Path its inventory path.
	Name, Path string
	// VMFolder is its VM folder.
	VMFolder Ref
}

// Cluster is one compute cluster and what its hosts reach.
type Cluster struct {
	// Ref is the cluster.
	Ref Ref
	// Name is its name and Path its inventory path.
	Name, Path string
	// Datacenter is the datacenter it is in.
	Datacenter Datacenter
	// ResourcePool is its root resource pool ("Resources").
	ResourcePool Ref
	// Datastores are the datastores it mounts and Networks the networks it has.
	Datastores, Networks []Ref
	// Hosts are its hosts.
	Hosts []Ref
}

// StoragePod is a datastore cluster.
type StoragePod struct {
	// Ref is the datastore cluster.
	Ref Ref
	// Name is its name.
	Name string
	// Datacenter is the datacenter it is in.
	Datacenter Ref
	// Datastores are the datastores in it.
	Datastores []Ref
}

// Datastore is a datastore as discovery found it.
type Datastore struct {
	// Ref is the datastore.
	Ref Ref
	// Name is its name.
	Name string
	// Accessible is false when vCenter says the datastore cannot be reached.
	Accessible bool
	// FreeBytes is its free space.
	FreeBytes int64
}

// Network is a network as discovery found it.
type Network struct {
	// Ref is the network; its type says whether it is a standard port group (Network),
	// a distributed port group or an opaque network.
	Ref Ref
	// Name is its name.
	Name string
}

// entity is what discovery reads of every inventory object.
type entity struct {
	ref    types.ManagedObjectReference
	name   string
	parent *types.ManagedObjectReference
	props  map[string]any
}

// Discover reads the datacenters, clusters, datastores and networks in one property
// collector call through a container view of the whole inventory.
func (c *Client) Discover(ctx context.Context) (*Inventory, error) {
	objs, err := c.retrieveView(ctx, map[string][]string{
		"Datacenter":                  {"name", "parent", "vmFolder"},
		"Folder":                      {"name", "parent"},
		"StoragePod":                  {"name", "parent", "childEntity"},
		"ClusterComputeResource":      {"name", "parent", "resourcePool", "datastore", "network", "host"},
		"HostSystem":                  {"capability.nestedHVSupported", "runtime.connectionState", "runtime.inMaintenanceMode", "datastore"},
		"Datastore":                   {"name", "summary.accessible", "summary.freeSpace"},
		"Network":                     {"name"},
		"DistributedVirtualPortgroup": {"name"},
		"OpaqueNetwork":               {"name"},
	})
	if err != nil {
		return nil, c.fail("discover the vCenter inventory", err)
	}
	byRef := map[types.ManagedObjectReference]*entity{}
	for i := range objs {
		byRef[objs[i].ref] = &objs[i]
	}
	inv := &Inventory{
		Datastores: map[Ref]Datastore{}, Networks: map[Ref]Network{}, NestedHV: map[Ref]bool{},
		Usable: map[Ref]bool{}, HostDatastores: map[Ref][]Ref{},
	}
	datacenter := func(e *entity) Datacenter {
		dc := Datacenter{Ref: refOf(e.ref), Name: e.name, Path: inventoryPath(byRef, e)}
		if ref, ok := e.props["vmFolder"].(types.ManagedObjectReference); ok {
			dc.VMFolder = refOf(ref)
		}
		return dc
	}
	for i := range objs {
		e := &objs[i]
		switch e.ref.Type {
		case "Datacenter":
			inv.Datacenters = append(inv.Datacenters, datacenter(e))
		case "ClusterComputeResource":
			dc := datacenterOf(byRef, e)
			if dc == nil {
				continue
			}
			cl := Cluster{
				Ref: refOf(e.ref), Name: e.name, Path: inventoryPath(byRef, e), Datacenter: datacenter(dc),
				Datastores: refs(e.props["datastore"]), Networks: refs(e.props["network"]), Hosts: refs(e.props["host"]),
			}
			if ref, ok := e.props["resourcePool"].(types.ManagedObjectReference); ok {
				cl.ResourcePool = refOf(ref)
			}
			inv.Clusters = append(inv.Clusters, cl)
		case "StoragePod":
			if dc := datacenterOf(byRef, e); dc != nil {
				inv.StoragePods = append(inv.StoragePods, StoragePod{
					Ref: refOf(e.ref), Name: e.name, Datacenter: refOf(dc.ref), Datastores: refs(e.props["childEntity"]),
				})
			}
		case "HostSystem":
			if e.props["capability.nestedHVSupported"] == true {
				inv.NestedHV[refOf(e.ref)] = true
			}
			if e.props["runtime.connectionState"] == types.HostSystemConnectionStateConnected && e.props["runtime.inMaintenanceMode"] != true {
				inv.Usable[refOf(e.ref)] = true
			}
			inv.HostDatastores[refOf(e.ref)] = refs(e.props["datastore"])
		case "Datastore":
			free, _ := e.props["summary.freeSpace"].(int64)
			inv.Datastores[refOf(e.ref)] = Datastore{
				Ref: refOf(e.ref), Name: e.name, Accessible: e.props["summary.accessible"] != false, FreeBytes: free,
			}
		case "Network", "DistributedVirtualPortgroup", "OpaqueNetwork":
			inv.Networks[refOf(e.ref)] = Network{Ref: refOf(e.ref), Name: e.name}
		}
	}
	return inv, nil
}

// retrieveView reads the given properties of every object of the given types in the
// whole inventory, in one call.
func (c *Client) retrieveView(ctx context.Context, kinds map[string][]string) ([]entity, error) {
	objs, err := c.retrieveIn(ctx, c.vim.ServiceContent.RootFolder, kinds)
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
func (c *Client) retrieveIn(ctx context.Context, container types.ManagedObjectReference, kinds map[string][]string) ([]types.ObjectContent, error) {
	kindList := make([]string, 0, len(kinds))
	for k := range kinds {
		kindList = append(kindList, k)
	}
	sort.Strings(kindList)
	v, err := view.NewManager(c.vim).CreateContainerView(ctx, container, kindList, true)
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
	res, err := property.DefaultCollector(c.vim).RetrieveProperties(ctx, types.RetrieveProperties{SpecSet: []types.PropertyFilterSpec{spec}})
	if err != nil {
		return nil, err
	}
	return res.Returnval, nil
}

// refs returns the references of an ArrayOfManagedObjectReference property.
func refs(v any) []Ref {
	a, ok := v.(types.ArrayOfManagedObjectReference)
	if !ok {
		return nil
	}
	out := make([]Ref, 0, len(a.ManagedObjectReference))
	for _, r := range a.ManagedObjectReference {
		out = append(out, refOf(r))
	}
	return out
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
