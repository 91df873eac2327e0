package providersdk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// domainsNamed returns failure domains with the given names.
func domainsNamed(names ...string) []banlieuev1.FailureDomain {
	out := make([]banlieuev1.FailureDomain, 0, len(names))
	for _, n := range names {
		out = append(out, banlieuev1.FailureDomain{Name: n})
	}
	return out
}

// domainsCounted returns n failure domains named fd-1 to fd-n.
func domainsCounted(n int) []banlieuev1.FailureDomain {
	names := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("fd-%d", i))
	}
	return domainsNamed(names...)
}

func TestTheFailureDomainsColumnSummarisesTheInventory(t *testing.T) {
	long := strings.Repeat("a", 40)
	tests := []struct {
		name    string
		domains []banlieuev1.FailureDomain
		want    string
	}{{
		name: "no failure domain leaves the summary empty",
		want: "",
	}, {
		name:    "one failure domain is named",
		domains: domainsNamed("esx-01"),
		want:    "esx-01",
	}, {
		name:    "three failure domains are all named, in the inventory's order",
		domains: domainsNamed("dc1-c2", "dc1-c1", "dc2-c1"),
		want:    "dc1-c2, dc1-c1, dc2-c1",
	}, {
		name:    "beyond three names the rest are counted",
		domains: domainsNamed("dc1-c1", "dc1-c2", "dc1-c3", "dc1-c4", "dc1-c5"),
		want:    "dc1-c1, dc1-c2, dc1-c3 (+2 more)",
	}, {
		name:    "a thousand failure domains stay one short line",
		domains: domainsCounted(1000),
		want:    "fd-1, fd-2, fd-3 (+997 more)",
	}, {
		name:    "long names are counted rather than named past 64 characters",
		domains: domainsNamed(long+"-1", long+"-2", "short"),
		want:    long + "-1 (+2 more)",
	}, {
		name:    "a first name longer than 64 characters is cut",
		domains: domainsNamed(strings.Repeat("b", 100), "c"),
		want:    strings.Repeat("b", 63) + "… (+1 more)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			inv := func(context.Context) (providersdk.Inventory, error) {
				return providersdk.Inventory{FailureDomains: tt.domains}, nil
			}
			e.reconcileProvider(newProviderReconciler(backendWith(nil, inv)))
			got := e.getProvider().Status
			if diff := cmp.Diff(tt.want, got.FailureDomainSummary); diff != "" {
				t.Errorf("failureDomainSummary (-want +got):\n%s", diff)
			}
			if len(got.FailureDomains) != len(tt.domains) {
				t.Errorf("failureDomains has %d entries, want all %d", len(got.FailureDomains), len(tt.domains))
			}
		})
	}
}

func TestTheFailureDomainsColumnShowsTheSummary(t *testing.T) {
	if k8s == nil {
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: "providers.banlieue.io"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	got := map[string]string{}
	for _, v := range versions {
		columns, _, _ := unstructured.NestedSlice(v.(map[string]any), "additionalPrinterColumns")
		for _, c := range columns {
			col := c.(map[string]any)
			if col["name"] == "Failure domains" {
				got[fmt.Sprint(v.(map[string]any)["name"])] = fmt.Sprint(col["jsonPath"])
			}
		}
	}
	if diff := cmp.Diff(map[string]string{"v1alpha1": ".status.failureDomainSummary"}, got); diff != "" {
		t.Errorf("the Failure domains column of each version (-want +got):\n%s", diff)
	}
}
