package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/test/testenv"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the helm binary: $HELM, or the one 'bash hack/tool.sh helm' builds from
// the pins in hack/tools/helm (once, then cached). Without one it fails the test in CI
// (CI=true) and skips it elsewhere, as testenv does for the envtest binaries.
func helm(tb testing.TB) string {
	tb.Helper()
	helmOnce.Do(func() {
		if h := os.Getenv("HELM"); h != "" {
			helmPath = h
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("bash", testenv.RepoPath("hack/tool.sh"), "helm")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("HELM is not set and 'bash hack/tool.sh helm' failed: %w\n%s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmPath = lines[len(lines)-1]
	})
	switch {
	case helmErr == nil:
	case os.Getenv("CI") == "true":
		tb.Fatal(helmErr)
	default:
		tb.Skip(helmErr)
	}
	return helmPath
}

// renderChart renders charts/banlieue as the release "banlieue" in the system namespace
// with 'helm template --include-crds', each of set passed as --set.
func renderChart(tb testing.TB, set ...string) ([]*unstructured.Unstructured, error) {
	tb.Helper()
	return renderChartIn(tb, systemNamespace, set...)
}

// renderChartIn renders charts/banlieue as the release "banlieue" in namespace.
func renderChartIn(tb testing.TB, namespace string, set ...string) ([]*unstructured.Unstructured, error) {
	tb.Helper()
	args := make([]string, 0, 6+2*len(set))
	args = append(args, "template", "banlieue", testenv.RepoPath("charts/banlieue"), "--namespace", namespace, "--include-crds")
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helmTemplate(tb, args...)
}

// helmTemplate runs helm with args, in a home of its own, and decodes the objects it prints.
func helmTemplate(tb testing.TB, args ...string) ([]*unstructured.Unstructured, error) {
	tb.Helper()
	home := tb.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm(tb), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return decodeYAML(&stdout)
}

// decodeYAML decodes the objects of a multi-document YAML stream, skipping empty ones.
func decodeYAML(r io.Reader) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read a YAML document: %w", err)
		}
		// Through JSON, so that numbers are int64 as the API machinery expects.
		b, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("failed to read a YAML document: %w", err)
		}
		if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("failed to decode %s: %w", b, err)
		}
		objs = append(objs, o)
	}
}

// chartCase is one set of chart values and the kustomizations an operator applies for
// the same installation.
type chartCase struct {
	name string
	set  []string
	// overlays are relative to the repository's root; userData adds
	// config/providers/user-data for userNamespace.
	overlays []string
	userData bool
}

var chartCases = []chartCase{
	{name: "default values", overlays: []string{"config/default"}},
	{name: "vSphere provider", set: []string{"providers.vsphere.enabled=true"}, overlays: []string{"config/default", "config/providers/vsphere"}},
	{name: "libvirt provider", set: []string{"providers.libvirt.enabled=true"}, overlays: []string{"config/default", "config/providers/libvirt"}},
	{name: "Proxmox provider", set: []string{"providers.proxmox.enabled=true"}, overlays: []string{"config/default", "config/providers/proxmox"}},
	{name: "a vSphere provider shard", set: []string{"providers.vsphere.enabled=true", "providers.vsphere.shards[0].name=dc1", "providers.vsphere.shards[0].selector=site=dc1"},
		overlays: []string{"config/default", "config/providers/shard-example"}},
	{name: "two core shards", set: []string{"controller.shards=2"}, overlays: []string{"config/core-shards"}},
	{
		name:     "every provider, with user-data Secrets in a user's namespace",
		set:      []string{"providers.vsphere.enabled=true", "providers.libvirt.enabled=true", "providers.proxmox.enabled=true", "providers.secretNamespaces={" + userNamespace + "}"},
		overlays: overlays, userData: true,
	},
}

func TestEveryObjectTheChartRendersIsAcceptedByTheAPIServer(t *testing.T) {
	// The Providers' and the user's namespaces exist once the suite has installed. The
	// release goes to a namespace of its own, so that its Deployments do not meet those
	// kustomize installed (a selector is immutable); its cluster-wide objects are the
	// same as kustomize's, and a dry-run updates them.
	installed(t)
	ctx := context.Background()
	const release = "banlieue-helm"
	NewWithT(t).Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}})).To(Succeed())
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := renderChartIn(t, release, tc.set...)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(objs).NotTo(BeEmpty())
			var errs []error
			for _, o := range objs {
				errs = append(errs, apply(ctx, o, client.DryRunAll))
			}
			g.Expect(errors.Join(errs...)).NotTo(HaveOccurred())
		})
	}
}

func TestTheChartAndKustomizeInstallTheSameEssentials(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := renderChart(t, tc.set...)
			g.Expect(err).NotTo(HaveOccurred())
			chart := essentials(g, objs)

			var kustomized []*unstructured.Unstructured
			for _, o := range tc.overlays {
				objs, err := render(testenv.RepoPath(o))
				g.Expect(err).NotTo(HaveOccurred())
				kustomized = append(kustomized, objs...)
			}
			if tc.userData {
				objs, err := renderUserData(userNamespace)
				g.Expect(err).NotTo(HaveOccurred())
				kustomized = append(kustomized, objs...)
			}
			kustomize := essentials(g, kustomized)

			g.Expect(sortedKeys(chart)).To(Equal(sortedKeys(kustomize)), "(kind, namespace, name) of the chart's objects, then kustomize's")
			for k, v := range kustomize {
				g.Expect(chart[k]).To(Equal(v), "%s, the chart's then kustomize's", k)
			}
		})
	}
}

// essentials keys the objects an installation must agree on by "kind namespace/name":
// CRDs and ServiceAccounts (by name alone), admission policies and their bindings (their
// specs), Roles and ClusterRoles (their rules),
// bindings (role and subjects, sorted) and Deployments (what their pods run as and with).
func essentials(g *WithT, objs []*unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	key := func(o client.Object, kind string) string {
		return kind + " " + o.GetNamespace() + "/" + o.GetName()
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "ServiceAccount":
			out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = true
		case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
			// Cluster-scoped: kustomize, which does not know these kinds, gives them
			// config/default's namespace, and the API server drops it.
			out[o.GetKind()+" /"+o.GetName()] = o.Object["spec"]
		}
	}
	for _, r := range typed[rbacv1.ClusterRole](g, objs, "ClusterRole") {
		out[key(r, "ClusterRole")] = r.Rules
	}
	for _, r := range typed[rbacv1.Role](g, objs, "Role") {
		out[key(r, "Role")] = r.Rules
	}
	type binding struct {
		RoleRef  rbacv1.RoleRef
		Subjects []rbacv1.Subject
	}
	sortSubjects := func(s []rbacv1.Subject) []rbacv1.Subject {
		s = slices.Clone(s)
		slices.SortFunc(s, func(a, b rbacv1.Subject) int {
			return strings.Compare(a.Kind+" "+a.Namespace+"/"+a.Name, b.Kind+" "+b.Namespace+"/"+b.Name)
		})
		return s
	}
	for _, b := range typed[rbacv1.ClusterRoleBinding](g, objs, "ClusterRoleBinding") {
		out[key(b, "ClusterRoleBinding")] = binding{RoleRef: b.RoleRef, Subjects: sortSubjects(b.Subjects)}
	}
	for _, b := range typed[rbacv1.RoleBinding](g, objs, "RoleBinding") {
		out[key(b, "RoleBinding")] = binding{RoleRef: b.RoleRef, Subjects: sortSubjects(b.Subjects)}
	}
	type container struct {
		Image, Args, Env, Ports, Resources, SecurityContext, Probes, VolumeMounts any
	}
	type pod struct {
		Replicas, ServiceAccountName, SecurityContext, Volumes any
		Containers                                             []container
	}
	for _, d := range typed[appsv1.Deployment](g, objs, "Deployment") {
		spec := d.Spec.Template.Spec
		p := pod{Replicas: d.Spec.Replicas, ServiceAccountName: spec.ServiceAccountName, SecurityContext: spec.SecurityContext, Volumes: spec.Volumes}
		for _, c := range spec.Containers {
			p.Containers = append(p.Containers, container{
				Image: c.Image, Args: c.Args, Env: c.Env, Ports: c.Ports, Resources: c.Resources, SecurityContext: c.SecurityContext,
				Probes: []any{c.LivenessProbe, c.ReadinessProbe}, VolumeMounts: c.VolumeMounts,
			})
		}
		out[key(d, "Deployment")] = p
	}
	return out
}

// sortedKeys returns m's keys, sorted.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestTheChartPlacesGeneratedRolesInTheValuesNamespaces(t *testing.T) {
	g := NewWithT(t)
	// Released into "ops", with Providers in "datacenter-a": the Roles generated for
	// banlieue-system and infra follow.
	objs, err := helmTemplate(t, "template", "banlieue", testenv.RepoPath("charts/banlieue"), "--namespace", "ops",
		"--set", "providersNamespace=datacenter-a", "--set", "providers.vsphere.enabled=true", "--set", "providers.secretNamespaces={tenant-a,tenant-b}")
	g.Expect(err).NotTo(HaveOccurred())
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range typed[rbacv1.Role](g, objs, "Role") {
		roles[r.Namespace+"/"+r.Name] = r.Rules
	}
	secrets := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}
	g.Expect(roles).To(Equal(map[string][]rbacv1.PolicyRule{
		"ops/banlieue-controller":                leaderElectionRules,
		"ops/banlieue-provider-vsphere":          leaderElectionRules,
		"datacenter-a/banlieue-provider-vsphere": {{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get"}}},
		"tenant-a/banlieue-provider-user-data":   secrets,
		"tenant-b/banlieue-provider-user-data":   secrets,
	}))
	for _, b := range typed[rbacv1.RoleBinding](g, objs, "RoleBinding") {
		g.Expect(roles).To(HaveKey(b.Namespace+"/"+b.RoleRef.Name), "RoleBinding %s/%s", b.Namespace, b.Name)
		for _, s := range b.Subjects {
			g.Expect(s.Namespace).To(Equal("ops"))
		}
	}

	// Released into the Providers' namespace, a provider's two Roles there are one.
	objs, err = helmTemplate(t, "template", "banlieue", testenv.RepoPath("charts/banlieue"), "--namespace", providersNamespace, "--set", "providers.libvirt.enabled=true")
	g.Expect(err).NotTo(HaveOccurred())
	roles = map[string][]rbacv1.PolicyRule{}
	for _, r := range typed[rbacv1.Role](g, objs, "Role") {
		g.Expect(roles).NotTo(HaveKey(r.Namespace+"/"+r.Name), "one Role per name and namespace")
		roles[r.Namespace+"/"+r.Name] = r.Rules
	}
	g.Expect(roles).To(HaveKeyWithValue(providersNamespace+"/banlieue-provider-libvirt", append(slices.Clone(leaderElectionRules),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get"}})))

	// secretNamespaces without any provider grants nothing.
	objs, err = renderChart(t, "providers.secretNamespaces={tenant-a}")
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		g.Expect(o.GetNamespace()).NotTo(Equal("tenant-a"), "%s %s", o.GetKind(), o.GetName())
	}
}
