package proxmox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

// Requests of the simulator that ListVMs makes.
const (
	listRequest   = "GET /cluster/resources"
	configRequest = "GET /nodes/{node}/qemu/{vmid}/pending"
)

// ListVMs lists, on a cluster where VMs were made by their owner, by a machine and
// adopted by one, each VM its owner made and no machine manages once, with the name,
// location, power, shape and firmware PVE has for it, and a provider ID that an
// adopting machine's Observe finds unclaimed. The template, the machine's VM, the
// adopted VM and a VM whose description alone names a machine are not listed; only
// the VMs the listing leaves are read, one config each; the cluster is not changed.
func TestListVMsListsTheVMsNoMachineManages(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	api := outsideAPI(sim)
	if err := api.Post(ctx, "/pools", map[string]any{"poolid": "tenant-a"}, nil); err != nil {
		t.Fatal(err)
	}
	s := connect(t, sim, newDriver(sim))

	running := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	stopped := makeLegacyVM(t, sim, api, proxmoxtest.Node2, map[string]any{
		"start": 0, "pool": "tenant-a", "bios": "ovmf", "sockets": 2, "memory": 1024,
		"virtio1": proxmoxtest.Storage + ":3", "tags": "",
	})
	made := newMachine("115a1e00-0000-4000-8000-000000000001")
	converge(t, s, made)
	adopted := makeLegacyVM(t, sim, api, proxmoxtest.Node1, nil)
	adopt(t, s, adoptingMachine("115a1e00-0000-4000-8000-000000000002", s.providerID(adopted)))
	// A UID in the description without the tag, which banlieue never writes alone: the
	// listing cannot tell, the config does.
	described := makeLegacyVM(t, sim, api, proxmoxtest.Node1, map[string]any{
		"description": ownerNotes + description(newMachine("115a1e00-0000-4000-8000-000000000003"), ""),
	})
	sim.ReportStatus() // the listing's names and status, as pvestatd's next round has them
	before := fmt.Sprint(sim.VMs())

	sim.ResetRequests()
	got, err := s.ListVMs(ctx)
	if err != nil {
		t.Fatalf("ListVMs: %v", err)
	}
	requests := sim.Requests()
	want := []providersdk.UnmanagedVM{
		{
			ProviderID: "proxmox://" + proxmoxtest.Cluster + "/" + fmt.Sprint(running), Name: fmt.Sprintf("legacy-%d", running),
			Location: proxmoxtest.Node1, PowerState: banlieuev1.PowerStatePoweredOn,
			Hardware: providersdk.Hardware{CPUs: 4, MemoryMiB: 3072, DiskBytes: []int64{8 * providersdk.GiB}},
			Firmware: banlieuev1.FirmwareBIOS,
		},
		{
			ProviderID: "proxmox://" + proxmoxtest.Cluster + "/" + fmt.Sprint(stopped), Name: fmt.Sprintf("legacy-%d", stopped),
			Location: proxmoxtest.Node2 + "/tenant-a", PowerState: banlieuev1.PowerStatePoweredOff,
			Hardware: providersdk.Hardware{CPUs: 8, MemoryMiB: 1024, DiskBytes: []int64{8 * providersdk.GiB, 3 * providersdk.GiB}},
			Firmware: banlieuev1.FirmwareEFI,
		},
	}
	byID := func(a, b providersdk.UnmanagedVM) int { return strings.Compare(a.ProviderID, b.ProviderID) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListVMs (-want +got):\n%s\nmachine's VM %d, adopted %d, described %d, template %d must not be listed",
			diff, statusOf(t, made).VMID, adopted, described, proxmoxtest.TemplateVMID)
	}
	// One listing, and one config for each VM it leaves: the two listed and the one
	// whose description names a machine.
	if requests[listRequest] != 1 || requests[configRequest] != 3 {
		t.Errorf("ListVMs made %d listings and %d config reads, want 1 and 3 (all requests: %v)",
			requests[listRequest], requests[configRequest], requests)
	}
	if after := fmt.Sprint(sim.VMs()); after != before {
		t.Errorf("listing changed the cluster:\nbefore %s\nafter  %s", before, after)
	}

	// Each listed ID is one an adopting machine takes: Observe finds the VM unclaimed,
	// with the same ID and power.
	for i, vm := range got {
		m := adoptingMachine(fmt.Sprintf("115a1e00-0000-4000-8000-00000000010%d", i), vm.ProviderID)
		o, err := s.Observe(ctx, m)
		if err != nil || !o.Exists || !o.Unclaimed || o.ProviderID != vm.ProviderID || o.PowerState != vm.PowerState {
			t.Errorf("Observe of a machine adopting %s = %+v, %v; want it unclaimed, %s", vm.ProviderID, o, err, vm.PowerState)
		}
	}
}

// A Provider scoped to nodes or a pool lists only the unmanaged VMs there, as its
// adopting machines' Observe admits them.
func TestListVMsKeepsToTheProvidersNodesAndPool(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	api := outsideAPI(sim)
	for _, pool := range []string{"tenant-a", "tenant-a/web", "tenant-b"} {
		if err := api.Post(ctx, "/pools", map[string]any{"poolid": pool}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stopped := map[string]any{"start": 0}
	vms := map[string]int{
		"node1":          makeLegacyVM(t, sim, api, proxmoxtest.Node1, stopped),
		"node2":          makeLegacyVM(t, sim, api, proxmoxtest.Node2, stopped),
		"node1 tenant-a": makeLegacyVM(t, sim, api, proxmoxtest.Node1, map[string]any{"start": 0, "pool": "tenant-a"}),
		"node2 web":      makeLegacyVM(t, sim, api, proxmoxtest.Node2, map[string]any{"start": 0, "pool": "tenant-a/web"}),
		"node2 tenant-b": makeLegacyVM(t, sim, api, proxmoxtest.Node2, map[string]any{"start": 0, "pool": "tenant-b"}),
	}
	sim.ReportStatus()

	tests := []struct {
		name   string
		params map[string]string
		want   []string
	}{
		{name: "the whole cluster", params: nil, want: slices.Collect(maps.Keys(vms))},
		{name: "one node", params: map[string]string{ParamNode: proxmoxtest.Node2}, want: []string{"node2", "node2 web", "node2 tenant-b"}},
		{name: "a pool and its nested pools", params: map[string]string{ParamPool: "tenant-a"}, want: []string{"node1 tenant-a", "node2 web"}},
		{name: "a nested pool", params: map[string]string{ParamPool: "tenant-a/web"}, want: []string{"node2 web"}},
		{name: "a node and a pool", params: map[string]string{ParamNode: proxmoxtest.Node1, ParamPool: "tenant-a"}, want: []string{"node1 tenant-a"}},
		{name: "both nodes", params: map[string]string{ParamNode: proxmoxtest.Node1 + ", " + proxmoxtest.Node2}, want: slices.Collect(maps.Keys(vms))},
		{name: "a pool with no VM", params: map[string]string{ParamPool: "tenant-c"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := connectWith(t, sim, tt.params)
			list, err := s.ListVMs(ctx)
			if err != nil {
				t.Fatalf("ListVMs: %v", err)
			}
			var got []string
			for _, vm := range list {
				found := false
				for what, vmid := range vms {
					if vm.ProviderID == s.providerID(vmid) {
						got, found = append(got, what), true
					}
				}
				if !found {
					t.Errorf("ListVMs listed %+v, which the test did not make", vm)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ListVMs (-want +got):\n%s", diff)
			}
			for _, vm := range list {
				o, err := s.Observe(ctx, adoptingMachine("115a1e00-0000-4000-8000-000000000200", vm.ProviderID))
				if err != nil || !o.Unclaimed {
					t.Errorf("Observe of a machine adopting the listed %s = %+v, %v; want it unclaimed", vm.ProviderID, o, err)
				}
			}
		})
	}
}
