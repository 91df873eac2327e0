package placement

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// benchCase is the size of one placement decision.
type benchCase struct {
	providers, domains, vms int
}

func (c benchCase) String() string {
	return fmt.Sprintf("providers=%d/domains=%d/vms=%d", c.providers, c.domains, c.vms)
}

// benchInputs builds a Scheduler, a Request and a LoadFunc for c. Every Provider is
// eligible and has c.domains failure domains, each with its own rack and one of three
// zones. The c.vms existing VMs are spread over every failure domain except the last
// Provider's; they are the load and the peers of a required anti-affinity term on rack
// (so only the last Provider is left) and of a preferred one on zone.
func benchInputs(c benchCase) (*Scheduler, *Request, LoadFunc) {
	image := &banlieuev1.VMImage{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
			{ProviderClass: "vsphere", Kind: banlieuev1.ImageSourceURL, Ref: "https://images.example/ubuntu.qcow2"},
		}},
	}
	class := &banlieuev1.VMClass{
		ObjectMeta: metav1.ObjectMeta{Name: "medium"},
		Spec: banlieuev1.VMClassSpec{
			Hardware: banlieuev1.Hardware{CPUs: 2, MemoryMiB: 4096, Disks: []banlieuev1.Disk{
				{Name: "root", SizeGiB: 20, StorageClass: "fast"},
				{Name: "data", SizeGiB: 100, StorageClass: "bulk"},
			}},
			Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
			Firmware: banlieuev1.FirmwareEFISecure,
		},
	}
	providers := make([]*banlieuev1.Provider, 0, c.providers)
	for i := range c.providers {
		p := &banlieuev1.Provider{
			ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: fmt.Sprintf("p-%04d", i), Labels: map[string]string{"env": "prod"}},
			Spec: banlieuev1.ProviderSpec{
				ProviderClassRef: banlieuev1.LocalObjectReference{Name: "vsphere"},
				Capabilities: banlieuev1.Capabilities{
					StorageClasses: []banlieuev1.ClassMapping{{Name: "fast"}, {Name: "bulk"}},
					NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod"}},
					Features:       []string{efiSecureBootFeature},
				},
				NamespaceSelector: &banlieuev1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}},
			},
			Status: banlieuev1.ProviderStatus{
				MachineKind: banlieuev1.MachineKind{APIGroup: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "VSphereMachine"},
				Conditions:  []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue}},
			},
		}
		for j := range c.domains {
			p.Status.FailureDomains = append(p.Status.FailureDomains, banlieuev1.FailureDomain{
				Name:   fmt.Sprintf("fd-%03d", j),
				Labels: map[string]string{"rack": fmt.Sprintf("%s-%d", p.Name, j), "zone": fmt.Sprintf("z%d", j%3)},
				Attributes: banlieuev1.FailureDomainAttributes{
					AvailableStorageClasses: []string{"fast", "bulk"},
					AvailableNetworkClasses: []string{"prod"},
				},
			})
		}
		providers = append(providers, p)
		image.Status.PerProvider = append(image.Status.PerProvider, banlieuev1.ImageProviderStatus{
			ProviderNamespace: p.Namespace, ProviderName: p.Name, Ready: ptr.To(true),
		})
	}
	occupiable := (c.providers - 1) * c.domains
	load := make(map[Location]int, occupiable)
	peers := make([]Location, 0, c.vms)
	for k := range c.vms {
		i, j := (k/c.domains)%(c.providers-1), k%c.domains
		loc := Location{"infra", providers[i].Name, providers[i].Status.FailureDomains[j].Name}
		load[loc]++
		peers = append(peers, loc)
	}
	req := &Request{
		Namespace:             "team-a",
		NamespaceLabels:       labels.Set{"tenant": "yes"},
		Class:                 class,
		Image:                 image,
		ProviderSelector:      labels.SelectorFromSet(labels.Set{"env": "prod"}),
		FailureDomainSelector: labels.Everything(),
		AntiAffinity: []Term{
			// Each term has its own copy of the peers, as the controller lists them per term.
			{TopologyKey: "rack", Required: true, Peers: slices.Clone(peers)},
			{TopologyKey: "zone", Peers: slices.Clone(peers)},
		},
	}
	return NewScheduler(providers), req, func(l Location) int { return load[l] }
}

// BenchmarkSchedule times one decision: the headline size first, then each dimension
// varied on its own with the other two at the headline's values.
func BenchmarkSchedule(b *testing.B) {
	headline := benchCase{providers: 100, domains: 10, vms: 10_000}
	type run struct {
		group string
		c     benchCase
	}
	runs := make([]run, 0, 10)
	runs = append(runs, run{"headline", headline})
	for _, n := range []int{10, 100, 1000} {
		runs = append(runs, run{"providers", benchCase{n, headline.domains, headline.vms}})
	}
	for _, n := range []int{1, 10, 50} {
		runs = append(runs, run{"domains", benchCase{headline.providers, n, headline.vms}})
	}
	for _, n := range []int{1_000, 10_000, 100_000} {
		runs = append(runs, run{"vms", benchCase{headline.providers, headline.domains, n}})
	}
	for _, r := range runs {
		c, name := r.c, r.group+"/"+r.c.String()
		b.Run(name, func(b *testing.B) {
			s, req, load := benchInputs(c)
			if d, rej := s.Schedule(req, load); d == nil {
				b.Fatalf("no decision: %s", Message(req.Namespace, rej))
			}
			b.ReportAllocs()
			for b.Loop() {
				s.Schedule(req, load)
			}
		})
	}
}

// BenchmarkNewSchedulerAndSchedule times what the controller does per reconcile at the
// headline size: build a Scheduler over the Providers, then decide.
func BenchmarkNewSchedulerAndSchedule(b *testing.B) {
	s, req, load := benchInputs(benchCase{providers: 100, domains: 10, vms: 10_000})
	b.ReportAllocs()
	for b.Loop() {
		NewScheduler(s.providers).Schedule(req, load)
	}
}
