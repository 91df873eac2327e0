package install

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/test/testenv"
)

// capiManagerRole is the ClusterRole that aggregates into Cluster API's manager role.
const capiManagerRole = "banlieue-capi-manager"

// TestClusterAPIsManagerMayDriveEveryMachineKind: Cluster API's manager creates machines
// from templates, patches and deletes them, for every machine kind banlieue has (taken
// from the CRDs, so a new kind without the grant fails here), and never writes status.
// kustomize and the chart (by default) install it; the chart's value turns it off.
func TestClusterAPIsManagerMayDriveEveryMachineKind(t *testing.T) {
	g := NewWithT(t)
	objs, err := render(testenv.RepoPath("config/default"))
	g.Expect(err).NotTo(HaveOccurred())
	role := roleNamed(g, objs, capiManagerRole)
	g.Expect(role).NotTo(BeNil(), "config/default renders no ClusterRole %s", capiManagerRole)
	g.Expect(role.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/aggregate-to-manager", "true"))

	var kinds []string
	for _, crd := range typed[apiextensionsv1.CustomResourceDefinition](g, objs, "CustomResourceDefinition") {
		if crd.Spec.Group == infrav1.GroupVersion.Group {
			kinds = append(kinds, crd.Spec.Names.Plural)
		}
	}
	g.Expect(kinds).NotTo(BeEmpty())
	var granted []string
	for _, r := range role.Rules {
		g.Expect(r.APIGroups).To(Equal([]string{infrav1.GroupVersion.Group}))
		g.Expect(r.Verbs).To(ConsistOf("get", "list", "watch", "create", "update", "patch", "delete"))
		granted = append(granted, r.Resources...)
	}
	slices.Sort(kinds)
	slices.Sort(granted)
	g.Expect(granted).To(Equal(kinds), "every machine kind and template, no status subresource")

	for _, tc := range []struct {
		set  []string
		want bool
	}{{nil, true}, {[]string{"capi.aggregateToManager=false"}, false}} {
		objs, err := renderChart(t, tc.set...)
		g.Expect(err).NotTo(HaveOccurred())
		chartRole := roleNamed(g, objs, capiManagerRole)
		if !tc.want {
			g.Expect(chartRole).To(BeNil(), "the chart with %v renders %s", tc.set, capiManagerRole)
			continue
		}
		g.Expect(chartRole).NotTo(BeNil())
		g.Expect(chartRole.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/aggregate-to-manager", "true"))
		g.Expect(chartRole.Rules).To(Equal(role.Rules))
	}
}

// roleNamed is the ClusterRole name among objs; nil when there is none.
func roleNamed(g *WithT, objs []*unstructured.Unstructured, name string) *rbacv1.ClusterRole {
	for _, r := range typed[rbacv1.ClusterRole](g, objs, "ClusterRole") {
		if r.Name == name {
			return r
		}
	}
	return nil
}
