package vsphere

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
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

// inventory is the Provider's view of one discovery: its failure domains and where
// things are.
type inventory struct {
	domains []*failureDomain
	byName  map[string]*failureDomain
	byHost  map[vcenter.Ref]*failureDomain
	// datacenters holds the names and inventory paths of every datacenter, with or
	// without clusters; datacenterNames are their names, sorted.
	datacenters     map[string]bool
	datacenterNames []string
}

// failureDomain is a compute cluster of a datacenter and what its hosts can reach.
type failureDomain struct {
	name           string
	datacenter     vcenter.Ref
	datacenterName string
	datacenterPath string
	vmFolder       vcenter.Ref
	cluster        vcenter.Ref
	clusterName    string
	clusterPath    string
	resourcePool   vcenter.Ref
	nestedHV       bool

	// datastores maps the names of the accessible datastores the cluster mounts to them.
	datastores map[string]vcenter.Datastore
	// pods maps datastore cluster names to the cluster's datastores in them.
	pods map[string][]vcenter.Datastore
	// networks maps the names of the cluster's networks to them.
	networks map[string]vcenter.Ref
	// hosts are the cluster's hosts that can take a new VM, in the cluster's order.
	hosts []clusterHost
}

// clusterHost is a host that can take a new VM and the datastores it mounts.
type clusterHost struct {
	ref        vcenter.Ref
	datastores []vcenter.Ref
}

// Inventory discovers the failure domains and what each offers.
func (s *session) Inventory(ctx context.Context) (providersdk.Inventory, error) {
	if s.params.hotplugErr != nil {
		return providersdk.Inventory{}, s.params.hotplugErr
	}
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
		AvailableStorageClasses: providersdk.AvailableClasses(s.storageClasses, func(target map[string]string) bool {
			_, ok, _ := fd.storageTarget(target)
			return ok
		}),
		AvailableNetworkClasses: providersdk.AvailableClasses(s.networkClasses, func(target map[string]string) bool {
			name, named := target[targetNetwork]
			_, found := fd.networks[name]
			return !named || found
		}),
		Features: []string{FeatureEFISecureBoot},
		Raw: map[string]string{
			rawDatacenterPath: fd.datacenterPath,
			rawClusterPath:    fd.clusterPath,
			rawResourcePool:   fd.resourcePool.Value,
		},
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

// domainByHost returns the failure domain of a host, discovering the inventory again
// when the host is new to it; nil when the host is in no cluster, or the inventory
// cannot be read.
func (s *session) domainByHost(ctx context.Context, host vcenter.Ref) *failureDomain {
	if host.IsZero() {
		return nil
	}
	for _, refresh := range []bool{false, true} {
		inv, err := s.domains(ctx, refresh)
		if err != nil {
			return nil
		}
		if fd := inv.byHost[host]; fd != nil {
			return fd
		}
	}
	return nil
}

// domainOfHost returns the name of a host's failure domain; "" when it has none.
func (s *session) domainOfHost(ctx context.Context, host vcenter.Ref) string {
	if fd := s.domainByHost(ctx, host); fd != nil {
		return fd.name
	}
	return ""
}

// discover reads vCenter's inventory in one call, makes a failure domain of every
// compute cluster of the Provider's datacenters, and caches what it found.
func (s *session) discover(ctx context.Context) (*inventory, error) {
	found, err := s.vc.Discover(ctx)
	if err != nil {
		return nil, err
	}
	inv := &inventory{byName: map[string]*failureDomain{}, byHost: map[vcenter.Ref]*failureDomain{}, datacenters: map[string]bool{}}
	for _, dc := range found.Datacenters {
		inv.datacenters[dc.Name], inv.datacenters[dc.Path] = true, true
		inv.datacenterNames = append(inv.datacenterNames, dc.Name)
	}
	slices.Sort(inv.datacenterNames)
	for _, c := range found.Clusters {
		if dc := s.params.datacenter; dc != "" && dc != c.Datacenter.Name && dc != c.Datacenter.Path {
			continue
		}
		inv.domains = append(inv.domains, domainOf(found, c, inv.byHost))
	}
	for _, pod := range found.StoragePods {
		for _, fd := range inv.domains {
			if fd.datacenter != pod.Datacenter {
				continue
			}
			for _, child := range pod.Datastores {
				for _, ds := range fd.datastores {
					if ds.Ref == child {
						fd.pods[pod.Name] = append(fd.pods[pod.Name], ds)
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

// domainOf is cluster c's failure domain, yet unnamed; its hosts are added to byHost.
func domainOf(found *vcenter.Inventory, c vcenter.Cluster, byHost map[vcenter.Ref]*failureDomain) *failureDomain {
	fd := &failureDomain{
		datacenter:     c.Datacenter.Ref,
		datacenterName: c.Datacenter.Name,
		datacenterPath: c.Datacenter.Path,
		vmFolder:       c.Datacenter.VMFolder,
		cluster:        c.Ref,
		clusterName:    c.Name,
		clusterPath:    c.Path,
		resourcePool:   c.ResourcePool,
		datastores:     map[string]vcenter.Datastore{},
		pods:           map[string][]vcenter.Datastore{},
		networks:       map[string]vcenter.Ref{},
	}
	for _, ref := range c.Datastores {
		if ds, ok := found.Datastores[ref]; ok && ds.Accessible {
			fd.datastores[ds.Name] = ds
		}
	}
	for _, ref := range c.Networks {
		if n, ok := found.Networks[ref]; ok {
			fd.networks[n.Name] = ref
		}
	}
	fd.nestedHV = len(c.Hosts) > 0
	for _, h := range c.Hosts {
		byHost[h] = fd
		if !found.NestedHV[h] {
			fd.nestedHV = false
		}
		if found.Usable[h] {
			fd.hosts = append(fd.hosts, clusterHost{ref: h, datastores: found.HostDatastores[h]})
		}
	}
	return fd
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

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
