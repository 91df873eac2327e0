package libvirt

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestInventory(t *testing.T) {
	d := daemon(t)
	s := connect(t, d.QEMUURI(), map[string]string{ParamFailureDomain: "rack1-kvm1"})
	inv, err := s.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := s.hostInfo(t.Context())
	want := []banlieuev1.FailureDomain{{
		Name:   "rack1-kvm1",
		Labels: map[string]string{"rack": "r1", "host": providersdk.LabelValue(h.hostname)},
		Attributes: banlieuev1.FailureDomainAttributes{
			AvailableStorageClasses: []string{"fast"},
			AvailableNetworkClasses: []string{"lan"},
		},
	}}
	if diff := cmp.Diff(want, inv.FailureDomains, cmpopts.IgnoreFields(banlieuev1.FailureDomainAttributes{}, "Features", "Raw")); diff != "" {
		t.Errorf("failure domains (-want +got):\n%s", diff)
	}
	attrs := inv.FailureDomains[0].Attributes
	// OVMF is installed by hack/deps.sh, so the QEMU driver offers UEFI and Secure Boot;
	// "gpu" is declared by the Provider and passed through.
	for _, f := range []string{FeatureEFI, FeatureEFISecureBoot, "gpu"} {
		if !slices.Contains(attrs.Features, f) {
			t.Errorf("features %v lack %s", attrs.Features, f)
		}
	}
	if attrs.Raw["domainType"] != "kvm" && attrs.Raw["domainType"] != "qemu" {
		t.Errorf("domain type %q, want kvm or qemu", attrs.Raw["domainType"])
	}
}
