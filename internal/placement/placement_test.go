package placement

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// The fixtures: Providers in namespace "infra" of class vsphere, Ready, claimed, offering
// storage class "fast" and network class "prod"; a class with one "fast" disk and one
// "prod" interface; an image with a vsphere Template source; a VM in namespace "team-a".

type providerOpt func(*banlieuev1.Provider)

func provider(name string, opts ...providerOpt) *banlieuev1.Provider {
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: name},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: "vsphere"},
			Capabilities: banlieuev1.Capabilities{
				StorageClasses: []banlieuev1.ClassMapping{{Name: "fast"}},
				NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod"}},
			},
		},
		Status: banlieuev1.ProviderStatus{
			MachineKind: banlieuev1.MachineKind{APIGroup: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "VSphereMachine"},
			Conditions:  []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func inNamespace(ns string) providerOpt { return func(p *banlieuev1.Provider) { p.Namespace = ns } }

func providerLabels(kv ...string) providerOpt {
	return func(p *banlieuev1.Provider) { p.Labels = pairs(kv...) }
}

func ofClass(class string) providerOpt {
	return func(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = class }
}

func paused() providerOpt { return func(p *banlieuev1.Provider) { p.Spec.Paused = ptr.To(true) } }

func deleting() providerOpt {
	return func(p *banlieuev1.Provider) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }
}

func unclaimed() providerOpt {
	return func(p *banlieuev1.Provider) { p.Status.MachineKind = banlieuev1.MachineKind{} }
}

func notReady(message string) providerOpt {
	return func(p *banlieuev1.Provider) {
		p.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "Unreachable", Message: message}}
	}
}

func noConditions() providerOpt { return func(p *banlieuev1.Provider) { p.Status.Conditions = nil } }

func features(f ...string) providerOpt {
	return func(p *banlieuev1.Provider) { p.Spec.Capabilities.Features = f }
}

func storageClasses(names ...string) providerOpt {
	return func(p *banlieuev1.Provider) { p.Spec.Capabilities.StorageClasses = mappings(names) }
}

func networkClasses(names ...string) providerOpt {
	return func(p *banlieuev1.Provider) { p.Spec.Capabilities.NetworkClasses = mappings(names) }
}

func namespaceSelector(sel *banlieuev1.LabelSelector) providerOpt {
	return func(p *banlieuev1.Provider) { p.Spec.NamespaceSelector = sel }
}

func domains(fds ...banlieuev1.FailureDomain) providerOpt {
	return func(p *banlieuev1.Provider) { p.Status.FailureDomains = fds }
}

type domainOpt func(*banlieuev1.FailureDomain)

func domain(name string, opts ...domainOpt) banlieuev1.FailureDomain {
	fd := banlieuev1.FailureDomain{Name: name}
	for _, o := range opts {
		o(&fd)
	}
	return fd
}

func domainLabels(kv ...string) domainOpt {
	return func(fd *banlieuev1.FailureDomain) { fd.Labels = pairs(kv...) }
}

func availableStorage(names ...string) domainOpt {
	return func(fd *banlieuev1.FailureDomain) { fd.Attributes.AvailableStorageClasses = names }
}

func availableNetworks(names ...string) domainOpt {
	return func(fd *banlieuev1.FailureDomain) { fd.Attributes.AvailableNetworkClasses = names }
}

func availableFeatures(names ...string) domainOpt {
	return func(fd *banlieuev1.FailureDomain) { fd.Attributes.Features = names }
}

type requestOpt func(*Request)

func request(opts ...requestOpt) *Request {
	req := &Request{
		Namespace:       "team-a",
		NamespaceLabels: labels.Set{"team": "a"},
		Class: &banlieuev1.VMClass{
			ObjectMeta: metav1.ObjectMeta{Name: "small"},
			Spec: banlieuev1.VMClassSpec{
				Hardware: banlieuev1.Hardware{CPUs: 1, MemoryMiB: 1024, Disks: []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}},
				Network:  banlieuev1.Network{Interfaces: []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}},
			},
		},
		Image: &banlieuev1.VMImage{
			ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
			Spec: banlieuev1.VMImageSpec{Sources: []banlieuev1.ImageSource{
				{ProviderClass: "vsphere", Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-24.04"},
			}},
		},
	}
	for _, o := range opts {
		o(req)
	}
	return req
}

func selectProviders(sel string) requestOpt {
	return func(r *Request) { r.ProviderSelector = mustParse(sel) }
}

func selectDomains(sel string) requestOpt {
	return func(r *Request) { r.FailureDomainSelector = mustParse(sel) }
}

func inVMNamespace(ns string, kv ...string) requestOpt {
	return func(r *Request) { r.Namespace, r.NamespaceLabels = ns, pairs(kv...) }
}

func classFeatures(f ...string) requestOpt { return func(r *Request) { r.Class.Spec.Features = f } }

func firmware(f banlieuev1.Firmware) requestOpt {
	return func(r *Request) { r.Class.Spec.Firmware = f }
}

func imageSource(class string, kind banlieuev1.ImageSourceKind) requestOpt {
	return func(r *Request) {
		r.Image.Spec.Sources = []banlieuev1.ImageSource{{ProviderClass: class, Kind: kind, Ref: "ubuntu"}}
	}
}

func imageRow(providerName string, ready bool, reason, message string) requestOpt {
	return func(r *Request) {
		r.Image.Status.PerProvider = append(r.Image.Status.PerProvider, banlieuev1.ImageProviderStatus{
			ProviderNamespace: "infra", ProviderName: providerName, Ready: ptr.To(ready), Reason: reason, Message: message,
		})
	}
}

// required and preferred add an anti-affinity term whose peers are at locs.
func required(key string, locs ...Location) requestOpt {
	return func(r *Request) {
		r.AntiAffinity = append(r.AntiAffinity, Term{TopologyKey: key, Required: true, Peers: locs})
	}
}

func preferred(key string, locs ...Location) requestOpt {
	return func(r *Request) { r.AntiAffinity = append(r.AntiAffinity, Term{TopologyKey: key, Peers: locs}) }
}

func current(l Location) requestOpt { return func(r *Request) { r.Current = &l } }

// at is a location in namespace "infra".
func at(providerName, failureDomain string) Location {
	return Location{ProviderNamespace: "infra", ProviderName: providerName, FailureDomain: failureDomain}
}

func pairs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func mappings(names []string) []banlieuev1.ClassMapping {
	out := make([]banlieuev1.ClassMapping, 0, len(names))
	for _, n := range names {
		out = append(out, banlieuev1.ClassMapping{Name: n})
	}
	return out
}

func mustParse(sel string) labels.Selector {
	s, err := labels.Parse(sel)
	if err != nil {
		panic(err)
	}
	return s
}

// loads is a LoadFunc over a fixed table; locations not in it are empty.
func loads(m map[Location]int) LoadFunc { return func(l Location) int { return m[l] } }

func TestSchedule(t *testing.T) {
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		req       *Request
		load      map[Location]int
		// want is the chosen location, or nil when wantRejections are expected.
		want           *Location
		wantRejections []Rejection
	}{
		{
			name:      "A single eligible Provider without failure domains is chosen with the unnamed domain.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(),
			want:      &Location{"infra", "a", ""},
		},
		{
			name:      "The providerSelector keeps only the Providers whose labels match.",
			providers: []*banlieuev1.Provider{provider("a", providerLabels("env", "dev")), provider("b", providerLabels("env", "prod"))},
			req:       request(selectProviders("env=prod")),
			want:      &Location{"infra", "b", ""},
		},
		{
			name:           "A Provider the providerSelector does not match is rejected with that reason.",
			providers:      []*banlieuev1.Provider{provider("a", providerLabels("env", "dev"))},
			req:            request(selectProviders("env=prod")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "not selected by placement.providerSelector"}},
		},
		{
			name: "A namespaceSelector that admits the VM's namespace keeps the Provider eligible.",
			providers: []*banlieuev1.Provider{
				provider("a", namespaceSelector(&banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "a"}})),
			},
			req:  request(),
			want: &Location{"infra", "a", ""},
		},
		{
			name: "A namespaceSelector that does not admit the VM's namespace rejects the Provider.",
			providers: []*banlieuev1.Provider{
				provider("a", namespaceSelector(&banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "a"}})),
			},
			req:            request(inVMNamespace("team-b", "team", "b")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `its namespaceSelector does not admit namespace "team-b"`, NotAdmitted: true}},
		},
		{
			name: "A namespaceSelector with an expression rejects namespaces without the label.",
			providers: []*banlieuev1.Provider{
				provider("a", namespaceSelector(&banlieuev1.LabelSelector{MatchExpressions: []banlieuev1.LabelSelectorRequirement{
					{Key: "tier", Operator: metav1.LabelSelectorOpExists},
				}})),
			},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `its namespaceSelector does not admit namespace "team-a"`, NotAdmitted: true}},
		},
		{
			name:           "A paused Provider is rejected as paused.",
			providers:      []*banlieuev1.Provider{provider("a", paused())},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "paused"}},
		},
		{
			name:           "A Provider that is not Ready is rejected with its Ready condition's message.",
			providers:      []*banlieuev1.Provider{provider("a", notReady("vCenter did not answer"))},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "not Ready (vCenter did not answer)"}},
		},
		{
			name:           "A Provider with no Ready condition at all is rejected as not Ready.",
			providers:      []*banlieuev1.Provider{provider("a", noConditions())},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "not Ready"}},
		},
		{
			name:      "A Provider no provider controller has claimed is rejected, naming its class.",
			providers: []*banlieuev1.Provider{provider("a", unclaimed())},
			req:       request(),
			wantRejections: []Rejection{{
				Provider: "infra/a", Reason: `no provider controller for class "vsphere" has claimed it (status.machineKind is empty)`}},
		},
		{
			name:           "A Provider without the class's storage class is rejected, naming the disk.",
			providers:      []*banlieuev1.Provider{provider("a", storageClasses("slow"))},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `storage class "fast" (disk root) is not in its capabilities`}},
		},
		{
			name:           "A Provider without the class's network class is rejected, naming the interface.",
			providers:      []*banlieuev1.Provider{provider("a", networkClasses("dev"))},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `network class "prod" (interface eth0) is not in its capabilities`}},
		},
		{
			name:           "A Provider without a feature the class needs is rejected, naming the feature.",
			providers:      []*banlieuev1.Provider{provider("a", features("efiSecureBoot"))},
			req:            request(classFeatures("nestedVirtualization")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `feature "nestedVirtualization" is not in its capabilities`}},
		},
		{
			name:      "A Provider with every feature the class needs is chosen.",
			providers: []*banlieuev1.Provider{provider("a", features("nestedVirtualization", "efiSecureBoot"))},
			req:       request(classFeatures("nestedVirtualization")),
			want:      &Location{"infra", "a", ""},
		},
		{
			name:           "efi-secure firmware needs the efiSecureBoot feature even when the class does not list it.",
			providers:      []*banlieuev1.Provider{provider("a")},
			req:            request(firmware(banlieuev1.FirmwareEFISecure)),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `feature "efiSecureBoot" is not in its capabilities`}},
		},
		{
			name:      "efi-secure firmware is placed on a Provider that declares efiSecureBoot.",
			providers: []*banlieuev1.Provider{provider("a"), provider("b", features("efiSecureBoot"))},
			req:       request(firmware(banlieuev1.FirmwareEFISecure)),
			want:      &Location{"infra", "b", ""},
		},
		{
			name:      "Plain efi firmware does not need efiSecureBoot.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(firmware(banlieuev1.FirmwareEFI)),
			want:      &Location{"infra", "a", ""},
		},
		{
			name:           "A Provider whose class the image has no source for is rejected, naming the class.",
			providers:      []*banlieuev1.Provider{provider("a", ofClass("libvirt"))},
			req:            request(),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: `image ubuntu has no source for provider class "libvirt"`}},
		},
		{
			name:           "A Provider whose image row is not ready is rejected with the row's message.",
			providers:      []*banlieuev1.Provider{provider("a")},
			req:            request(imageRow("a", false, "ImportFailed", "checksum mismatch")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "image ubuntu is not ready here: checksum mismatch"}},
		},
		{
			name:           "A not-ready image row without a message gives its reason.",
			providers:      []*banlieuev1.Provider{provider("a")},
			req:            request(imageRow("a", false, "Importing", "")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "image ubuntu is not ready here: Importing"}},
		},
		{
			name:           "A not-ready image row with neither message nor reason says so.",
			providers:      []*banlieuev1.Provider{provider("a")},
			req:            request(imageRow("a", false, "", "")),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "image ubuntu is not ready here: no reason given"}},
		},
		{
			name:      "Another Provider's not-ready image row does not reject this one.",
			providers: []*banlieuev1.Provider{provider("a"), provider("b")},
			req:       request(imageRow("a", false, "", "template missing")),
			want:      &Location{"infra", "b", ""},
		},
		{
			name:           "A Url image with no row for the Provider has not been imported and is rejected.",
			providers:      []*banlieuev1.Provider{provider("a")},
			req:            request(imageSource("vsphere", banlieuev1.ImageSourceURL)),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "image ubuntu has not been imported here yet"}},
		},
		{
			name:      "A Url image with a ready row is placed where it was imported.",
			providers: []*banlieuev1.Provider{provider("a"), provider("b")},
			req:       request(imageSource("vsphere", banlieuev1.ImageSourceURL), imageRow("b", true, "", "")),
			want:      &Location{"infra", "b", ""},
		},
		{
			name: "The failureDomainSelector picks the failure domain whose labels match.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2", domainLabels("zone", "z2")),
			))},
			req:  request(selectDomains("zone=z2")),
			want: &Location{"infra", "a", "fd-2"},
		},
		{
			name: "The failureDomainSelector also sees the Provider's own labels.",
			providers: []*banlieuev1.Provider{
				provider("a", providerLabels("region", "eu"), domains(domain("fd-1"))),
				provider("b", providerLabels("region", "us"), domains(domain("fd-1"))),
			},
			req:  request(selectDomains("region=us")),
			want: &Location{"infra", "b", "fd-1"},
		},
		{
			name: "A Provider none of whose failure domains the failureDomainSelector matches is rejected domain by domain.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2", domainLabels("zone", "z2")),
			))},
			req: request(selectDomains("zone=z3")),
			wantRejections: []Rejection{{
				Provider: "infra/a", Reason: "fd-1: not selected by placement.failureDomainSelector; fd-2: not selected by placement.failureDomainSelector"}},
		},
		{
			name: "A failure domain that reports storage classes without the class's is skipped; one that reports none is trusted.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", availableStorage("slow")),
				domain("fd-2"),
			))},
			req:  request(),
			load: map[Location]int{at("a", "fd-2"): 5},
			want: &Location{"infra", "a", "fd-2"},
		},
		{
			name: "Failure domains lacking a storage class, a network class or a feature each say which.",
			providers: []*banlieuev1.Provider{provider("a", features("efiSecureBoot"), domains(
				domain("fd-1", availableStorage("slow")),
				domain("fd-2", availableStorage("fast"), availableNetworks("dev")),
				domain("fd-3", availableStorage("fast"), availableNetworks("prod"), availableFeatures("nestedVirtualization")),
			))},
			req: request(firmware(banlieuev1.FirmwareEFISecure)),
			wantRejections: []Rejection{{
				Provider: "infra/a", Reason: `fd-1: storage class "fast" is not available; fd-2: network class "prod" is not available; fd-3: feature "efiSecureBoot" is not available`}},
		},
		{
			name: "A failure domain that lists every class and feature the VM needs is chosen.",
			providers: []*banlieuev1.Provider{provider("a", features("efiSecureBoot"), domains(
				domain("fd-1", availableStorage("fast"), availableNetworks("prod"), availableFeatures("efiSecureBoot")),
			))},
			req:  request(firmware(banlieuev1.FirmwareEFISecure)),
			want: &Location{"infra", "a", "fd-1"},
		},
		{
			name: "Required anti-affinity blocks every failure domain sharing the peer's zone value, even a more loaded alternative wins.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2", domainLabels("zone", "z1")),
				domain("fd-3", domainLabels("zone", "z2")),
			))},
			req:  request(required("zone", at("a", "fd-1"))),
			load: map[Location]int{at("a", "fd-3"): 50},
			want: &Location{"infra", "a", "fd-3"},
		},
		{
			name: "Required anti-affinity rejects a Provider whose failure domains all share the peer's zone value.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2", domainLabels("zone", "z1")),
			))},
			req: request(required("zone", at("a", "fd-1"))),
			wantRejections: []Rejection{{
				Provider: "infra/a", Reason: "fd-1: required anti-affinity on zone=z1 is violated; fd-2: required anti-affinity on zone=z1 is violated"}},
		},
		{
			name: "Required anti-affinity compares zone values across Providers, including a zone set on the Provider itself.",
			providers: []*banlieuev1.Provider{
				provider("a", providerLabels("zone", "z1")),
				provider("b", domains(domain("fd-1", domainLabels("zone", "z1")))),
				provider("c", domains(domain("fd-1", domainLabels("zone", "z2")))),
			},
			req:  request(required("zone", at("b", "fd-1"))),
			want: &Location{"infra", "c", "fd-1"},
		},
		{
			name: "Required anti-affinity on the provider key keeps the VM off the peer's Provider.",
			providers: []*banlieuev1.Provider{
				provider("a", domains(domain("fd-1"), domain("fd-2"))),
				provider("b", domains(domain("fd-1"))),
			},
			req:  request(required(ProviderTopologyKey, at("a", "fd-1"))),
			load: map[Location]int{at("b", "fd-1"): 9},
			want: &Location{"infra", "b", "fd-1"},
		},
		{
			name: "A peer in a failure domain its Provider no longer reports still occupies that Provider.",
			providers: []*banlieuev1.Provider{
				provider("a", domains(domain("fd-2"))),
				provider("b", domains(domain("fd-1"))),
			},
			req:  request(required(ProviderTopologyKey, at("a", "fd-gone"))),
			want: &Location{"infra", "b", "fd-1"},
		},
		{
			name: "Failure domains without the topology label are not blocked by required anti-affinity.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2"),
			))},
			req:  request(required("zone", at("a", "fd-1"))),
			want: &Location{"infra", "a", "fd-2"},
		},
		{
			name: "Peers at unknown locations block nothing.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
			))},
			req:  request(required("zone", at("gone", "fd-1"))),
			want: &Location{"infra", "a", "fd-1"},
		},
		{
			name: "Preferred anti-affinity ranks a satisfying failure domain above a less loaded one.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
				domain("fd-2", domainLabels("zone", "z2")),
			))},
			req:  request(preferred("zone", at("a", "fd-1"))),
			load: map[Location]int{at("a", "fd-2"): 10},
			want: &Location{"infra", "a", "fd-2"},
		},
		{
			name: "Preferred anti-affinity that no failure domain satisfies still places the VM.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1")),
			))},
			req:  request(preferred("zone", at("a", "fd-1"))),
			want: &Location{"infra", "a", "fd-1"},
		},
		{
			name: "With two preferred terms, the failure domain breaking fewer of them wins.",
			providers: []*banlieuev1.Provider{provider("a", domains(
				domain("fd-1", domainLabels("zone", "z1", "rack", "r1")),
				domain("fd-2", domainLabels("zone", "z1", "rack", "r2")),
			))},
			req:  request(preferred("zone", at("a", "fd-1")), preferred("rack", at("a", "fd-1"))),
			load: map[Location]int{at("a", "fd-2"): 10},
			want: &Location{"infra", "a", "fd-2"},
		},
		{
			name: "Spread: among equally good failure domains the one with the fewest VMs wins.",
			providers: []*banlieuev1.Provider{
				provider("a", domains(domain("fd-1"), domain("fd-2"))),
				provider("b", domains(domain("fd-1"))),
			},
			req:  request(),
			load: map[Location]int{at("a", "fd-1"): 3, at("a", "fd-2"): 2, at("b", "fd-1"): 1},
			want: &Location{"infra", "b", "fd-1"},
		},
		{
			name:      "Ties go to the first Provider in name order, whatever order they are given in.",
			providers: []*banlieuev1.Provider{provider("c"), provider("a"), provider("b")},
			req:       request(),
			want:      &Location{"infra", "a", ""},
		},
		{
			name:      "Ties between namespaces go to the first namespace in name order.",
			providers: []*banlieuev1.Provider{provider("a", inNamespace("zz")), provider("z", inNamespace("aa"))},
			req:       request(),
			want:      &Location{"aa", "z", ""},
		},
		{
			name:      "Ties between failure domains go to the first in name order, whatever order the Provider reports them in.",
			providers: []*banlieuev1.Provider{provider("a", domains(domain("fd-3"), domain("fd-1"), domain("fd-2")))},
			req:       request(),
			want:      &Location{"infra", "a", "fd-1"},
		},
		{
			name: "The current placement is kept while valid, even though a less loaded Provider exists.",
			providers: []*banlieuev1.Provider{
				provider("a"),
				provider("b"),
			},
			req:  request(current(at("b", ""))),
			load: map[Location]int{at("b", ""): 100},
			want: &Location{"infra", "b", ""},
		},
		{
			name: "The current placement is kept even when it breaks a preferred anti-affinity term.",
			providers: []*banlieuev1.Provider{
				provider("a"),
				provider("b"),
			},
			req:  request(current(at("b", "")), preferred(ProviderTopologyKey, at("b", ""))),
			want: &Location{"infra", "b", ""},
		},
		{
			name: "A current placement on a paused, not Ready Provider is kept: an outage never moves a VM.",
			providers: []*banlieuev1.Provider{
				provider("a"),
				provider("b", paused(), notReady("vCenter did not answer")),
			},
			req:  request(current(at("b", ""))),
			want: &Location{"infra", "b", ""},
		},
		{
			name:      "An invalid current placement (its failure domain is gone) moves within the same Provider.",
			providers: []*banlieuev1.Provider{provider("a", domains(domain("fd-2")))},
			req:       request(current(at("a", "fd-1"))),
			want:      &Location{"infra", "a", "fd-2"},
		},
		{
			name:      "An invalid current placement (its Provider is gone) is replaced by a valid one.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(current(at("gone", ""))),
			want:      &Location{"infra", "a", ""},
		},
		{
			name: "An invalid current placement with no alternative gives every Provider's reason.",
			providers: []*banlieuev1.Provider{
				provider("a", notReady("")),
				provider("b", ofClass("proxmox")),
			},
			req:            request(current(at("b", ""))),
			wantRejections: []Rejection{{Provider: "infra/a", Reason: "not Ready"}, {Provider: "infra/b", Reason: `image ubuntu has no source for provider class "proxmox"`}},
		},
		{
			name: "When no Provider fits, every Provider is listed in name order with its own reason.",
			providers: []*banlieuev1.Provider{
				provider("c", ofClass("proxmox")),
				provider("a", paused()),
				provider("b", domains(domain("fd-1", domainLabels("zone", "z1")))),
			},
			req: request(required("zone", at("b", "fd-1"))),
			wantRejections: []Rejection{
				{Provider: "infra/a", Reason: "paused"},
				{Provider: "infra/b", Reason: "fd-1: required anti-affinity on zone=z1 is violated"},
				{Provider: "infra/c", Reason: `image ubuntu has no source for provider class "proxmox"`},
			},
		},
		{
			name:           "With no Providers at all there is no decision and no rejection.",
			req:            request(),
			wantRejections: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Core hands the scheduler the cache's own Providers, not copies: placement
			// must leave every one as it found it.
			before := make([]*banlieuev1.Provider, len(tt.providers))
			for i, p := range tt.providers {
				before[i] = p.DeepCopy()
			}
			d, rejections := NewScheduler(tt.providers).Schedule(tt.req, loads(tt.load))
			if diff := cmp.Diff(before, tt.providers, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Schedule() changed the Providers it was given (-before +after):\n%s", diff)
			}
			var got *Location
			if d != nil {
				got = &d.Location
				if d.Provider == nil || d.Provider.Namespace != d.ProviderNamespace || d.Provider.Name != d.ProviderName {
					t.Errorf("Decision.Provider = %v, want the Provider at %s", d.Provider, d.ProviderKey())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Schedule() location (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRejections, rejections); diff != "" {
				t.Errorf("Schedule() rejections (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScheduleInvalidNamespaceSelector(t *testing.T) {
	p := provider("a", namespaceSelector(&banlieuev1.LabelSelector{MatchExpressions: []banlieuev1.LabelSelectorRequirement{
		{Key: "team", Operator: "Sometimes"},
	}}))
	d, rejections := NewScheduler([]*banlieuev1.Provider{p}).Schedule(request(), loads(nil))
	if d != nil {
		t.Fatalf("Schedule() chose %s, want no decision", d.ProviderKey())
	}
	if len(rejections) != 1 || !strings.HasPrefix(rejections[0].Reason, "its namespaceSelector is invalid: ") {
		t.Errorf("Schedule() rejections = %v, want one saying the namespaceSelector is invalid", rejections)
	}
}

func TestNewSchedulerLeavesProvidersAlone(t *testing.T) {
	providers := []*banlieuev1.Provider{
		provider("b", domains(domain("fd-2"), domain("fd-1"))),
		provider("a"),
	}
	NewScheduler(providers).Schedule(request(), loads(nil))
	var got []string
	for _, p := range providers {
		got = append(got, p.Name)
		for _, fd := range p.Status.FailureDomains {
			got = append(got, p.Name+"/"+fd.Name)
		}
	}
	if diff := cmp.Diff([]string{"b", "b/fd-2", "b/fd-1", "a"}, got); diff != "" {
		t.Errorf("NewScheduler reordered its input (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	zoned := []*banlieuev1.Provider{
		provider("a", domains(
			domain("fd-1", domainLabels("zone", "z1")),
			domain("fd-2", domainLabels("zone", "z1")),
		)),
		provider("b", paused()),
	}
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		req       *Request
		loc       Location
		wantValid bool
		wantWhy   string
	}{
		{
			name:      "A location that still satisfies the request is valid.",
			providers: zoned,
			req:       request(),
			loc:       at("a", "fd-2"),
			wantValid: true,
		},
		{
			name:      "A location breaking only preferred anti-affinity is still valid.",
			providers: zoned,
			req:       request(preferred("zone", at("a", "fd-1"))),
			loc:       at("a", "fd-2"),
			wantValid: true,
		},
		{
			name:      "A location on a Provider that no longer exists is invalid.",
			providers: zoned,
			req:       request(),
			loc:       at("c", ""),
			wantWhy:   "Provider infra/c no longer exists",
		},
		{
			name:      "A location on a Provider being deleted is invalid: deleting a Provider moves its VMs.",
			providers: []*banlieuev1.Provider{provider("a", deleting())},
			req:       request(),
			loc:       at("a", ""),
			wantWhy:   "Provider infra/a: being deleted",
		},
		{
			name:      "A location on a paused Provider stays valid: pausing never moves VMs.",
			providers: zoned,
			req:       request(),
			loc:       at("b", ""),
			wantValid: true,
		},
		{
			name:      "A location on a Provider that can no longer run the image is invalid with the Provider's reason.",
			providers: []*banlieuev1.Provider{provider("b", ofClass("proxmox"))},
			req:       request(),
			loc:       at("b", ""),
			wantWhy:   `Provider infra/b: image ubuntu has no source for provider class "proxmox"`,
		},
		{
			name:      "A location whose Provider no longer matches the providerSelector is invalid.",
			providers: zoned,
			req:       request(selectProviders("env=prod")),
			loc:       at("a", "fd-1"),
			wantWhy:   "Provider infra/a: not selected by placement.providerSelector",
		},
		{
			name:      "A location whose failure domain is gone is invalid.",
			providers: zoned,
			req:       request(),
			loc:       at("a", "fd-9"),
			wantWhy:   "Provider infra/a no longer has failure domain fd-9",
		},
		{
			name:      "A location whose failure domain now breaks required anti-affinity is invalid.",
			providers: zoned,
			req:       request(required("zone", at("a", "fd-1"))),
			loc:       at("a", "fd-2"),
			wantWhy:   "Provider infra/a failure domain fd-2: required anti-affinity on zone=z1 is violated",
		},
		{
			name:      "A location the failureDomainSelector no longer matches is invalid.",
			providers: zoned,
			req:       request(selectDomains("zone=z2")),
			loc:       at("a", "fd-1"),
			wantWhy:   "Provider infra/a failure domain fd-1: not selected by placement.failureDomainSelector",
		},
		{
			name:      "The unnamed failure domain of a Provider that reports none is valid.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(),
			loc:       at("a", ""),
			wantValid: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, why := NewScheduler(tt.providers).Validate(tt.req, tt.loc)
			if got := d != nil; got != tt.wantValid {
				t.Errorf("Validate() valid = %v, want %v (reason %q)", got, tt.wantValid, why)
			}
			if d != nil && (d.Location != tt.loc || d.Provider.Name != tt.loc.ProviderName) {
				t.Errorf("Validate() = %+v, want the decision for %+v", d.Location, tt.loc)
			}
			if diff := cmp.Diff(tt.wantWhy, why); diff != "" {
				t.Errorf("Validate() reason (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFitsClass(t *testing.T) {
	withDisk := func(name, storageClass string) requestOpt {
		return func(r *Request) {
			r.Class.Spec.Hardware.Disks = append(r.Class.Spec.Hardware.Disks, banlieuev1.Disk{Name: name, SizeGiB: 10, StorageClass: storageClass})
		}
	}
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		req       *Request
		loc       Location
		want      string
	}{
		{
			name:      "A class whose storage and network classes the Provider offers fits.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(),
			loc:       at("a", ""),
		},
		{
			name:      "A class with a disk on a storage class the Provider does not declare does not fit.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(withDisk("data", "gold")),
			loc:       at("a", ""),
			want:      `Provider infra/a: storage class "gold" (disk data) is not in its capabilities`,
		},
		{
			name:      "A class with a disk on a storage class the failure domain reports unavailable does not fit.",
			providers: []*banlieuev1.Provider{provider("a", storageClasses("fast", "gold"), domains(domain("fd-1", availableStorage("fast"))))},
			req:       request(withDisk("data", "gold")),
			loc:       at("a", "fd-1"),
			want:      `Provider infra/a failure domain fd-1: storage class "gold" is not available`,
		},
		{
			name:      "A class needing a feature the Provider lacks does not fit; efi-secure needs efiSecureBoot.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(firmware(banlieuev1.FirmwareEFISecure)),
			loc:       at("a", ""),
			want:      `Provider infra/a: feature "efiSecureBoot" is not in its capabilities`,
		},
		{
			name:      "Only the class counts: a paused Provider fits.",
			providers: []*banlieuev1.Provider{provider("a", paused())},
			req:       request(),
			loc:       at("a", ""),
		},
		{
			name:      "A Provider that no longer exists is left to Validate.",
			providers: []*banlieuev1.Provider{provider("a")},
			req:       request(withDisk("data", "gold")),
			loc:       at("b", ""),
		},
		{
			name:      "A failure domain that no longer exists is left to Validate.",
			providers: []*banlieuev1.Provider{provider("a", domains(domain("fd-1")))},
			req:       request(),
			loc:       at("a", "fd-9"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, NewScheduler(tt.providers).FitsClass(tt.req.Class, tt.loc)); diff != "" {
				t.Errorf("FitsClass() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	many := func(n int) []Rejection {
		out := make([]Rejection, 0, n)
		for i := range n {
			out = append(out, Rejection{Provider: fmt.Sprintf("infra/p-%02d", i), Reason: "paused"})
		}
		return out
	}
	joined := func(n int) string {
		parts := make([]string, 0, n)
		for i := range n {
			parts = append(parts, fmt.Sprintf("infra/p-%02d: paused", i))
		}
		return strings.Join(parts, "; ")
	}
	tests := []struct {
		name       string
		rejections []Rejection
		want       string
	}{
		{
			name: "No rejections means there is no Provider at all.",
			want: "no Provider exists that could run this VM",
		},
		{
			name:       "Every Provider is named with its reason, in the order given.",
			rejections: []Rejection{{Provider: "infra/a", Reason: "paused"}, {Provider: "infra/b", Reason: "not Ready (vCenter did not answer)"}},
			want:       "no Provider can run this VM: infra/a: paused; infra/b: not Ready (vCenter did not answer)",
		},
		{
			name:       "Exactly 32 Providers are all listed.",
			rejections: many(32),
			want:       "no Provider can run this VM: " + joined(32),
		},
		{
			name:       "Past 32 Providers the rest are counted.",
			rejections: many(40),
			want:       "no Provider can run this VM: " + joined(32) + "; and 8 more",
		},
		{
			name:       "One Provider not admitting the namespace is counted, not named.",
			rejections: []Rejection{{Provider: "infra/a", Reason: "paused"}, notAdmitted("infra/b")},
			want:       `no Provider can run this VM: infra/a: paused; 1 Provider does not admit namespace "team-a"`,
		},
		{
			name:       "Only Providers not admitting the namespace: the message is their count alone.",
			rejections: []Rejection{notAdmitted("infra/a"), notAdmitted("infra/b"), notAdmitted("other/c")},
			want:       `no Provider can run this VM: 3 Providers do not admit namespace "team-a"`,
		},
		{
			name:       "Providers not admitting the namespace do not count against the 32 named.",
			rejections: append([]Rejection{notAdmitted("infra/a"), notAdmitted("infra/b")}, many(33)...),
			want:       "no Provider can run this VM: " + joined(32) + `; and 1 more; 2 Providers do not admit namespace "team-a"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Message("team-a", tt.rejections)); diff != "" {
				t.Errorf("Message() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMessageFromSchedule(t *testing.T) {
	providers := []*banlieuev1.Provider{
		provider("b", notReady("credentials rejected")),
		provider("a", paused()),
	}
	_, rejections := NewScheduler(providers).Schedule(request(), loads(nil))
	want := "no Provider can run this VM: infra/a: paused; infra/b: not Ready (credentials rejected)"
	if diff := cmp.Diff(want, Message("team-a", rejections)); diff != "" {
		t.Errorf("Message(Schedule()) (-want +got):\n%s", diff)
	}
}

// notAdmitted is the rejection of a Provider whose namespaceSelector does not admit
// namespace team-a.
func notAdmitted(provider string) Rejection {
	return Rejection{Provider: provider, Reason: `its namespaceSelector does not admit namespace "team-a"`, NotAdmitted: true}
}

func TestMessageNamesOnlyTheProvidersThatAdmitTheVMsNamespace(t *testing.T) {
	teamA := namespaceSelector(&banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "a"}})
	teamB := namespaceSelector(&banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": "b"}})
	broken := namespaceSelector(&banlieuev1.LabelSelector{MatchExpressions: []banlieuev1.LabelSelectorRequirement{{Key: "team", Operator: "Sometimes"}}})
	// secretive is a Provider of another tenant that would say much about itself.
	secretive := func(name string, opts ...providerOpt) *banlieuev1.Provider {
		return provider(name, append([]providerOpt{
			notReady("cannot reach https://vc-b.example/sdk with Secret infra/vc-b-creds"),
			domains(domain("rack-b1")),
			func(p *banlieuev1.Provider) {
				p.Spec.Connection = banlieuev1.Connection{Endpoint: "https://vc-b.example/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: "vc-b-creds"}}
			},
		}, opts...)...)
	}
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		req       *Request
		want      string
	}{
		{
			name:      "A Provider without a namespaceSelector admits every namespace and is named.",
			providers: []*banlieuev1.Provider{provider("a", storageClasses("slow"))},
			req:       request(inVMNamespace("tenant-a", "team", "a")),
			want:      `no Provider can run this VM: infra/a: storage class "fast" (disk root) is not in its capabilities`,
		},
		{
			name:      "A Provider whose namespaceSelector admits the namespace is named with its reason.",
			providers: []*banlieuev1.Provider{provider("a", teamA, paused())},
			req:       request(inVMNamespace("tenant-a", "team", "a")),
			want:      "no Provider can run this VM: infra/a: paused",
		},
		{
			name:      "A Provider that does not admit the namespace is counted, and nothing of it is said.",
			providers: []*banlieuev1.Provider{provider("a", teamA, paused()), secretive("b", teamB)},
			req:       request(inVMNamespace("tenant-a", "team", "a")),
			want:      `no Provider can run this VM: infra/a: paused; 1 Provider does not admit namespace "tenant-a"`,
		},
		{
			name:      "The same Providers seen from the other tenant's namespace swap roles.",
			providers: []*banlieuev1.Provider{provider("a", teamA, paused()), provider("b", teamB, paused())},
			req:       request(inVMNamespace("tenant-b", "team", "b")),
			want:      `no Provider can run this VM: infra/b: paused; 1 Provider does not admit namespace "tenant-b"`,
		},
		{
			name: "A Provider the providerSelector would also reject is still only counted.",
			providers: []*banlieuev1.Provider{
				provider("a", teamA, providerLabels("env", "dev")),
				secretive("b", teamB, providerLabels("env", "dev")),
				secretive("c", teamB, ofClass("proxmox")),
			},
			req:  request(inVMNamespace("tenant-a", "team", "a"), selectProviders("env in (prod, staging)")),
			want: `no Provider can run this VM: infra/a: not selected by placement.providerSelector; 2 Providers do not admit namespace "tenant-a"`,
		},
		{
			name:      "A Provider whose namespaceSelector does not parse admits no namespace and is counted.",
			providers: []*banlieuev1.Provider{secretive("a", broken), secretive("b", teamB)},
			req:       request(inVMNamespace("tenant-a", "team", "a")),
			want:      `no Provider can run this VM: 2 Providers do not admit namespace "tenant-a"`,
		},
		{
			name:      "A namespace without labels is admitted only by Providers without a namespaceSelector.",
			providers: []*banlieuev1.Provider{provider("a", teamA), provider("z", paused())},
			req:       request(inVMNamespace("tenant-c")),
			want:      `no Provider can run this VM: infra/z: paused; 1 Provider does not admit namespace "tenant-c"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, rejections := NewScheduler(tt.providers).Schedule(tt.req, loads(nil))
			if d != nil {
				t.Fatalf("Schedule() chose %s, want no decision", d.ProviderKey())
			}
			got := Message(tt.req.Namespace, rejections)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Message() (-want +got):\n%s", diff)
			}
			for _, leak := range []string{"vc-b", "rack-b1", "Sometimes"} {
				if strings.Contains(got, leak) {
					t.Errorf("Message() = %q, names %q of a Provider that does not admit the namespace", got, leak)
				}
			}
		})
	}
}

func TestReasonsQuoteProvidersSanitized(t *testing.T) {
	withConnection := func(p *banlieuev1.Provider) {
		p.Spec.Connection = banlieuev1.Connection{Endpoint: "https://vc.example/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: "vc-creds"}}
	}
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		req       *Request
		want      Rejection
	}{
		{
			name:      "A Provider's Ready message is quoted without its endpoint, Secret or a password.",
			providers: []*banlieuev1.Provider{provider("a", withConnection, notReady(`Post "https://admin:pw@vc.example/sdk?token=x": Secret infra/vc-creds rejected`))},
			req:       request(),
			want:      Rejection{Provider: "infra/a", Reason: `not Ready (Post "the backend": the Provider's credentials Secret rejected)`},
		},
		{
			name:      "An image row's message is quoted without the endpoint's host.",
			providers: []*banlieuev1.Provider{provider("a", withConnection)},
			req:       request(imageRow("a", false, "ImportFailed", "upload to vc.example:443 failed")),
			want:      Rejection{Provider: "infra/a", Reason: "image ubuntu is not ready here: upload to the backend:443 failed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rejections := NewScheduler(tt.providers).Schedule(tt.req, loads(nil))
			if diff := cmp.Diff([]Rejection{tt.want}, rejections); diff != "" {
				t.Errorf("Schedule() rejections (-want +got):\n%s", diff)
			}
		})
	}
}
