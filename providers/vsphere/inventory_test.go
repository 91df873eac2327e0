package vsphere

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

func TestInventoryReportsOneFailureDomainPerClusterWithItsClasses(t *testing.T) {
	sim := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Cluster = 2 }))
	ctx := context.Background()
	finder := find.NewFinder(sim.Client.Client)
	dc, err := finder.Datacenter(ctx, "DC0")
	check(t, err)
	finder.SetDatacenter(dc)

	// A datastore only the second cluster's first host mounts, in a datastore cluster.
	host, err := finder.HostSystem(ctx, "/DC0/host/DC0_C1/DC0_C1_H0")
	check(t, err)
	dss, err := host.ConfigManager().DatastoreSystem(ctx)
	check(t, err)
	fast, err := dss.CreateLocalDatastore(ctx, "fast-ssd", t.TempDir())
	check(t, err)
	dsFolder, err := finder.Folder(ctx, "/DC0/datastore")
	check(t, err)
	pod, err := dsFolder.CreateStoragePod(ctx, "gold-pod")
	check(t, err)
	task, err := pod.MoveInto(ctx, []types.ManagedObjectReference{fast.Reference()})
	check(t, err)
	check(t, task.Wait(ctx))

	pools := map[string]string{}
	for _, c := range []string{"DC0_C0", "DC0_C1"} {
		rp, err := finder.ResourcePool(ctx, "/DC0/host/"+c+"/Resources")
		check(t, err)
		pools[c] = rp.Reference().Value
	}

	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) {
		p.Spec.Capabilities = banlieuev1.Capabilities{
			StorageClasses: []banlieuev1.ClassMapping{
				{Name: "standard", Target: map[string]string{"datastore": vspheretest.Datastore}},
				{Name: "fast", Target: map[string]string{"datastore": "fast-ssd"}},
				{Name: "gold", Target: map[string]string{"datastoreCluster": "gold-pod"}},
				{Name: "missing", Target: map[string]string{"datastore": "no-such-datastore"}},
				{Name: "any", Target: map[string]string{"libvirtPool": "default"}},
			},
			NetworkClasses: []banlieuev1.ClassMapping{
				{Name: "prod", Target: map[string]string{"network": vspheretest.Network}},
				{Name: "dv", Target: map[string]string{"network": vspheretest.PortGroup}},
				{Name: "missing", Target: map[string]string{"network": "no-such-network"}},
			},
			Features: []string{"efiSecureBoot", "gpu"},
		}
	})
	inv, err := s.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	domain := func(cluster string, storage ...string) banlieuev1.FailureDomain {
		return banlieuev1.FailureDomain{
			Name:   "dc0-" + map[string]string{"DC0_C0": "dc0-c0", "DC0_C1": "dc0-c1"}[cluster],
			Labels: map[string]string{"dc": "DC0", "cluster": cluster},
			Attributes: banlieuev1.FailureDomainAttributes{
				AvailableStorageClasses: storage,
				AvailableNetworkClasses: []string{"prod", "dv"},
				Features:                []string{"efiSecureBoot", "gpu"},
				Raw: map[string]string{
					"datacenterPath": "/DC0",
					"clusterPath":    "/DC0/host/" + cluster,
					"resourcePool":   pools[cluster],
				},
			},
		}
	}
	want := []banlieuev1.FailureDomain{
		domain("DC0_C0", "standard", "any"),
		domain("DC0_C1", "standard", "fast", "gold", "any"),
	}
	if diff := cmp.Diff(want, inv.FailureDomains); diff != "" {
		t.Errorf("failure domains (-want +got):\n%s", diff)
	}
}

func TestInventoryWithoutClassesReportsEmptyLists(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{"datacenter": "DC0"} })
	inv, err := s.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.FailureDomains) != 1 {
		t.Fatalf("got %d failure domains, want 1", len(inv.FailureDomains))
	}
	a := inv.FailureDomains[0].Attributes
	if a.AvailableStorageClasses == nil || a.AvailableNetworkClasses == nil {
		t.Errorf("available classes are nil (%v, %v); want empty lists, so placement knows they were checked",
			a.AvailableStorageClasses, a.AvailableNetworkClasses)
	}
}

func TestInventoryHonoursTheDatacenterParameter(t *testing.T) {
	sim := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Datacenter = 2 }))
	for _, dc := range []string{"DC1", "/DC1"} {
		s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{"datacenter": dc} })
		inv, err := s.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range inv.FailureDomains {
			if fd.Labels["dc"] != "DC1" {
				t.Errorf("datacenter %s: failure domain %s is in datacenter %s", dc, fd.Name, fd.Labels["dc"])
			}
		}
		if len(inv.FailureDomains) == 0 {
			t.Errorf("datacenter %s: no failure domain", dc)
		}
	}
}

func TestInventoryFailsWhenTheDatacenterParameterNamesNoDatacenter(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{"datacenter": "DC9"} })
	_, err := s.Inventory(context.Background())
	if err == nil {
		t.Fatal("a datacenter that does not exist gave an inventory; want an error, so the Provider is not Ready with no failure domain")
	}
	want := `spec.parameters.datacenter "DC9" names no datacenter of vCenter ` + s.host + "; it has DC0"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if providersdk.IsClassified(err) {
		t.Errorf("error %v is classified; the Provider controller reports an unclassified Inventory error as InventoryFailed", err)
	}
}

func TestInventoryFailsWhenTheDatacenterHasNoCluster(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	if _, err := object.NewRootFolder(sim.Client.Client).CreateDatacenter(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{"datacenter": "empty"} })
	_, err := s.Inventory(ctx)
	want := `datacenter "empty" of vCenter ` + s.host + " has no compute cluster, which is where banlieue places VMs; " +
		"create one, or set spec.parameters.datacenter to a datacenter that has one"
	if err == nil || err.Error() != want {
		t.Fatalf("Inventory error %v, want %q", err, want)
	}
}

func TestFailureDomainNames(t *testing.T) {
	tests := []struct{ name, dc, cluster, want string }{
		{"names are lowercased and underscores become dashes", "DC0", "DC0_C0", "dc0-dc0-c0"},
		{"spaces and slashes become dashes", "Paris DC", "Rack 1/A", "paris-dc-rack-1-a"},
		{"long names are cut to 63 characters", "datacenter-with-a-rather-long-name", "cluster-with-an-even-longer-name-than-that", "datacenter-with-a-rather-long-name-cluster-with-an-even-longer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := providersdk.DNSLabel(tt.dc+"-"+tt.cluster, "default"); got != tt.want {
				t.Errorf("dnsName = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestClashingFailureDomainNamesGetASuffix(t *testing.T) {
	inv := &inventory{byName: map[string]*failureDomain{}, domains: []*failureDomain{
		{datacenterName: "DC", datacenterPath: "/DC", clusterName: "a_b", clusterPath: "/DC/host/a_b", cluster: vcenter.Ref{Type: "ClusterComputeResource", Value: "domain-c2"}},
		{datacenterName: "DC", datacenterPath: "/DC", clusterName: "a-b", clusterPath: "/DC/host/a-b", cluster: vcenter.Ref{Type: "ClusterComputeResource", Value: "domain-c1"}},
	}}
	nameDomains(inv)
	got := []string{inv.domains[0].name, inv.domains[1].name}
	want := []string{"dc-a-b", "dc-a-b-b4fb12a0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
