package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// adoptable publishes prefix as the Provider's providerIDPrefix, with adoptionPolicy
// Enabled.
func adoptable(prefix string) providerOpt {
	return func(p *banlieuev1.Provider) {
		p.Status.ProviderIDPrefix = prefix
		p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyEnabled
	}
}

// adopting makes the request adopt id, with no image, as core asks it.
func adopting(id string) requestOpt {
	return func(r *Request) {
		r.AdoptProviderID = id
		r.Image = &banlieuev1.VMImage{}
	}
}

func TestAdoptChoosesTheOneProviderThatOwnsTheVM(t *testing.T) {
	const id = "libvirt://kvm-01/4214a4ef-0000-0000-0000-000000000001"
	tests := []struct {
		name      string
		providers []*banlieuev1.Provider
		opts      []requestOpt
		// want is the chosen Provider; "" for none.
		want          string
		wantAmbiguous []string
		// wantReasons are the rejections' reasons by Provider.
		wantReasons map[string]string
	}{
		{
			name:      "the Provider whose prefix starts the ID, whatever its classes or image rows",
			providers: []*banlieuev1.Provider{provider("kvm-01", ofClass("libvirt"), adoptable("libvirt://kvm-01/")), provider("kvm-02", ofClass("libvirt"), adoptable("libvirt://kvm-02/"))},
			want:      "kvm-01",
		},
		{
			name:        "a prefix that is only a prefix of the host is another host",
			providers:   []*banlieuev1.Provider{provider("kvm-0", ofClass("libvirt"), adoptable("libvirt://kvm-0/"))},
			wantReasons: map[string]string{"infra/kvm-0": "its VMs' provider IDs start with libvirt://kvm-0/"},
		},
		{
			name: "adoptionPolicy Disabled is refused",
			providers: []*banlieuev1.Provider{provider("kvm-01", ofClass("libvirt"), adoptable("libvirt://kvm-01/"),
				func(p *banlieuev1.Provider) { p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyDisabled })},
			wantReasons: map[string]string{"infra/kvm-01": "its adoptionPolicy is not Enabled"},
		},
		{
			name:        "a Provider whose driver cannot adopt publishes no prefix",
			providers:   []*banlieuev1.Provider{provider("kvm-01", ofClass("libvirt"))},
			wantReasons: map[string]string{"infra/kvm-01": "its provider cannot adopt VMs (status.providerIDPrefix is empty)"},
		},
		{
			name:        "a paused Provider is refused as for any placement",
			providers:   []*banlieuev1.Provider{provider("kvm-01", ofClass("libvirt"), adoptable("libvirt://kvm-01/"), paused())},
			wantReasons: map[string]string{"infra/kvm-01": "paused"},
		},
		{
			name:          "two Providers with the same prefix are ambiguous",
			providers:     []*banlieuev1.Provider{provider("a", ofClass("libvirt"), adoptable("libvirt://kvm-01/")), provider("b", ofClass("libvirt"), adoptable("libvirt://kvm-01/"))},
			wantAmbiguous: []string{"infra/a", "infra/b"},
		},
		{
			name:      "the VM's providerSelector settles an ambiguity",
			providers: []*banlieuev1.Provider{provider("a", ofClass("libvirt"), adoptable("libvirt://kvm-01/"), providerLabels("site", "a")), provider("b", ofClass("libvirt"), adoptable("libvirt://kvm-01/"), providerLabels("site", "b"))},
			opts:      []requestOpt{selectProviders("site=b")},
			want:      "b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(append([]requestOpt{adopting(id)}, tt.opts...)...)
			d, rejections, ambiguous := NewScheduler(tt.providers).Adopt(req)
			got := ""
			if d != nil {
				got = d.ProviderName
				if d.FailureDomain != "" {
					t.Errorf("an adoption chose failure domain %q; the VM is where it is", d.FailureDomain)
				}
			}
			reasons := map[string]string{}
			for _, r := range rejections {
				if r.Reason != "not selected by placement.providerSelector" {
					reasons[r.Provider] = r.Reason
				}
			}
			if len(reasons) == 0 {
				reasons = nil
			}
			if diff := cmp.Diff([]any{tt.want, tt.wantAmbiguous, tt.wantReasons}, []any{got, ambiguous, reasons}); diff != "" {
				t.Errorf("chosen, ambiguous, rejections (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnAdoptedVMStaysWhenItsProviderDisablesAdoption(t *testing.T) {
	p := provider("kvm-01", ofClass("libvirt"), adoptable("libvirt://kvm-01/"))
	p.Spec.AdoptionPolicy = banlieuev1.AdoptionPolicyDisabled
	req := request(adopting("libvirt://kvm-01/4214a4ef-0000-0000-0000-000000000001"))
	if d, why := NewScheduler([]*banlieuev1.Provider{p}).Validate(req, Location{ProviderNamespace: "infra", ProviderName: "kvm-01"}); d == nil {
		t.Errorf("an adopted VM's placement is invalid once adoption is disabled: %s", why)
	}
}
