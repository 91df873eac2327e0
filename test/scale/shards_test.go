package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
)

func TestVMNamespaces(t *testing.T) {
	for _, tt := range []struct {
		name        string
		coreShards  int
		n           int
		first, last string
	}{
		{"one core keeps its one namespace", 1, 1, "scale", "scale"},
		{"two shards get 16", 2, 16, "scale-00", "scale-15"},
		{"four shards still 16", 4, 16, "scale-00", "scale-15"},
		{"five shards get four each", 5, 20, "scale-00", "scale-19"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := vmNamespaces(tt.coreShards)
			if len(got) != tt.n || got[0] != tt.first || got[len(got)-1] != tt.last {
				t.Errorf("vmNamespaces(%d) = %v, want %d from %s to %s", tt.coreShards, got, tt.n, tt.first, tt.last)
			}
		})
	}
}

func TestAssignNamespacesTurnsPerBackend(t *testing.T) {
	for _, tt := range []struct {
		name       string
		turns      []string
		namespaces []string
		want       []string
	}{
		{"one namespace", []string{"a", "b", "a"}, []string{"n"}, []string{"n", "n", "n"}},
		{
			// Turns over all VMs would put every a in n0 and every b in n1.
			"two backends taking turns over two namespaces: each backend in both",
			[]string{"a", "b", "a", "b", "a", "b"}, []string{"n0", "n1"},
			[]string{"n0", "n0", "n1", "n1", "n0", "n0"},
		},
		{
			"a backend that runs out leaves the others' turns as they were",
			[]string{"a", "b", "c", "a", "b", "a", "b"}, []string{"n0", "n1", "n2"},
			[]string{"n0", "n0", "n0", "n1", "n1", "n2", "n2"},
		},
		{"no VM", nil, []string{"n0"}, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, assignNamespaces(tt.turns, tt.namespaces)); diff != "" {
				t.Errorf("assignNamespaces (-want +got):\n%s", diff)
			}
		})
	}
}

// one VM in each namespace.
func oneEach(namespaces []string) map[string]int {
	m := map[string]int{}
	for _, ns := range namespaces {
		m[ns] = 1
	}
	return m
}

func TestCoreSharesFollowTheHashOfTheNamespace(t *testing.T) {
	// The shards of each case were worked out apart from the code under test (FNV-1a 32
	// by hand, modulo k). With two shards the sixteen namespaces split evenly: FNV-1a's
	// last step keeps the parity of the last byte, so scale-00…scale-09 alternate and
	// scale-10…scale-15, whose "1" flips the parity before, alternate the other way.
	for _, tt := range []struct {
		name         string
		perNamespace map[string]int
		k            int
		want         []coreShare
		wantErr      bool
	}{
		{"one core serves all", map[string]int{"scale": 300}, 1, []coreShare{{[]string{"scale"}, 300}}, false},
		{"two shards, sixteen namespaces", oneEach(vmNamespaces(2)), 2, []coreShare{
			{[]string{"scale-00", "scale-02", "scale-04", "scale-06", "scale-08", "scale-11", "scale-13", "scale-15"}, 8},
			{[]string{"scale-01", "scale-03", "scale-05", "scale-07", "scale-09", "scale-10", "scale-12", "scale-14"}, 8},
		}, false},
		{"three shards, sixteen namespaces: uneven, none empty", oneEach(vmNamespaces(3)), 3, []coreShare{
			{[]string{"scale-00", "scale-05", "scale-12", "scale-14"}, 4},
			{[]string{"scale-02", "scale-04", "scale-07", "scale-09", "scale-10", "scale-13", "scale-15"}, 7},
			{[]string{"scale-01", "scale-03", "scale-06", "scale-08", "scale-11"}, 5},
		}, false},
		{"VMs count, not namespaces", map[string]int{"scale-00": 5, "scale-01": 2, "scale-02": 1}, 2, []coreShare{
			{[]string{"scale-00", "scale-02"}, 6},
			{[]string{"scale-01"}, 2},
		}, false},
		{"an empty namespace counts for nothing", map[string]int{"scale-00": 3, "scale-01": 0}, 2, nil, true},
		{"too few VMs leave a shard idle", map[string]int{"scale-00": 1}, 2, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := coreShares(tt.perNamespace, tt.k)
			if (err != nil) != tt.wantErr {
				t.Fatalf("coreShares error = %v, want one: %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(coreShare{})); diff != "" {
				t.Errorf("coreShares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryCoreShardGetsEveryBackendsVMs spreads runs as the harness does and checks
// each core shard's share of each backend's VMs: the backends' turns must not line up
// with the shards'.
func TestEveryCoreShardGetsEveryBackendsVMs(t *testing.T) {
	for _, tt := range []struct {
		name string
		n, k int
		// want are each shard's VMs by backend.
		want []map[string]int
	}{
		{"300 VMs over two shards", 300, 2, []map[string]int{
			// 135 of each backend: scale-00…scale-06 get 9, the rest 8; libvirt's 30: 2 each
			// but 1 in scale-14 and scale-15.
			{vsphere.ProviderClass: 68, proxmox.ProviderClass: 68, libvirt.ProviderClass: 15},
			{vsphere.ProviderClass: 67, proxmox.ProviderClass: 67, libvirt.ProviderClass: 15},
		}},
		{"10,000 VMs over two shards", 10000, 2, []map[string]int{
			// 4,985 of each backend over 16 namespaces: scale-00…scale-08 get 312, the rest 311.
			{vsphere.ProviderClass: 2493, proxmox.ProviderClass: 2493, libvirt.ProviderClass: 15},
			{vsphere.ProviderClass: 2492, proxmox.ProviderClass: 2492, libvirt.ProviderClass: 15},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &bench{
				o:          options{vms: tt.n, libvirtMax: 30, coreShards: tt.k},
				namespaces: vmNamespaces(tt.k),
				backends:   []*backend{{class: vsphere.ProviderClass}, {class: proxmox.ProviderClass}, {class: libvirt.ProviderClass, powerOff: true}},
			}
			b.spread()
			perNamespace := map[string]int{}
			for _, vm := range b.vms() {
				perNamespace[vm.Namespace]++
			}
			shares, err := coreShares(perNamespace, tt.k)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]map[string]int, tt.k)
			for i, share := range shares {
				got[i] = map[string]int{}
				for _, vm := range b.vms() {
					for _, ns := range share.namespaces {
						if vm.Namespace == ns {
							got[i][vm.Labels[backendLabel]]++
						}
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("VMs per shard and backend (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitProvidersCopiesTheShardedClasses(t *testing.T) {
	provider := func(name, class string, labels map[string]string) *banlieuev1.Provider {
		return builder.Provider("infra", name, class, builder.WithLabels(labels))
	}
	secret := builder.Secret("infra", "vc", nil)
	objs := []client.Object{
		secret,
		provider("vc", vsphere.ProviderClass, map[string]string{"backend": vsphere.ProviderClass}),
		provider("kvm", libvirt.ProviderClass, map[string]string{"backend": libvirt.ProviderClass}),
	}
	type got struct {
		Name   string
		Labels map[string]string
	}
	for _, tt := range []struct {
		name string
		s    int
		want []got
	}{
		{"one shard leaves them", 1, []got{
			{"vc", nil}, {"vc", map[string]string{"backend": vsphere.ProviderClass}}, {"kvm", map[string]string{"backend": libvirt.ProviderClass}},
		}},
		{"three copies of the vSphere Provider, labelled, keeping the placement's labels", 3, []got{
			{"vc", nil},
			{"vc-0", map[string]string{"backend": vsphere.ProviderClass, scaleShardLabel: "0"}},
			{"vc-1", map[string]string{"backend": vsphere.ProviderClass, scaleShardLabel: "1"}},
			{"vc-2", map[string]string{"backend": vsphere.ProviderClass, scaleShardLabel: "2"}},
			{"kvm", map[string]string{"backend": libvirt.ProviderClass}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var gotObjs []got
			for _, obj := range splitProviders(objs, tt.s, shardedClasses...) {
				gotObjs = append(gotObjs, got{obj.GetName(), obj.GetLabels()})
			}
			if diff := cmp.Diff(tt.want, gotObjs); diff != "" {
				t.Errorf("splitProviders (-want +got):\n%s", diff)
			}
		})
	}
	if _, ok := objs[1].GetLabels()[scaleShardLabel]; ok {
		t.Error("splitProviders labelled the Provider it was given")
	}
}

func TestShardProcesses(t *testing.T) {
	core := []string{"controller", "--events", "none"}
	for _, tt := range []struct {
		name     string
		i, k     int
		wantName string
		wantArgs []string
	}{
		{"one core: no shard flags", 0, 1, "controller", core},
		{"a core shard", 1, 2, "controller-1", append(core[:3:3], "--shard-count", "2", "--shard-index", "1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name, args := coreProcess(tt.i, tt.k, core)
			if name != tt.wantName || !cmp.Equal(args, tt.wantArgs) {
				t.Errorf("coreProcess(%d, %d) = %s %v, want %s %v", tt.i, tt.k, name, args, tt.wantName, tt.wantArgs)
			}
		})
	}
	for _, tt := range []struct {
		name     string
		labels   map[string]string
		wantName string
		wantArgs []string
	}{
		{"a Provider of its own", map[string]string{"backend": "vsphere"}, "provider-vsphere", []string{"provider", "vsphere"}},
		{"a split Provider's shard", map[string]string{scaleShardLabel: "2"}, "provider-vsphere-2", []string{"provider", "vsphere", "--provider-selector", scaleShardLabel + "=2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name, args := providerProcess(builder.Provider("infra", "vc", vsphere.ProviderClass, builder.WithLabels(tt.labels)))
			if name != tt.wantName || !cmp.Equal(args, tt.wantArgs) {
				t.Errorf("providerProcess = %s %v, want %s %v", name, args, tt.wantName, tt.wantArgs)
			}
		})
	}
}
