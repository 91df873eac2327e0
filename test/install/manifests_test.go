package install

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/banlieue/banlieue/test/testenv"
)

func TestEveryRenderedObjectIsAcceptedByTheAPIServer(t *testing.T) {
	// install applies every object with dry-run, then for real.
	installed(t)
}

// typed converts every object of kind in objs to T.
func typed[T any](g *WithT, objs []*unstructured.Unstructured, kind string) []*T {
	var out []*T
	for _, o := range objs {
		if o.GetKind() == kind {
			t := new(T)
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, t)).To(Succeed())
			out = append(out, t)
		}
	}
	return out
}

func TestEachBinaryRunsLockedDownWithItsOwnIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, dir, deployment string
		args                  []string
	}{
		{name: "core controller", dir: "config/default", deployment: "banlieue-controller", args: []string{"controller", "--leader-elect"}},
		{name: "vSphere provider", dir: "config/providers/vsphere", deployment: "banlieue-provider-vsphere", args: []string{"provider", "vsphere", "--leader-elect"}},
		{name: "libvirt provider", dir: "config/providers/libvirt", deployment: "banlieue-provider-libvirt", args: []string{"provider", "libvirt", "--leader-elect"}},
		{name: "Proxmox provider", dir: "config/providers/proxmox", deployment: "banlieue-provider-proxmox", args: []string{"provider", "proxmox", "--leader-elect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := render(testenv.RepoPath(tc.dir))
			g.Expect(err).NotTo(HaveOccurred())

			deployments := typed[appsv1.Deployment](g, objs, "Deployment")
			g.Expect(deployments).To(HaveLen(1))
			d := deployments[0]
			g.Expect(d.Name).To(Equal(tc.deployment))
			g.Expect(d.Namespace).To(Equal(systemNamespace))
			pod := d.Spec.Template.Spec
			g.Expect(pod.ServiceAccountName).To(Equal(tc.deployment), "each binary has a ServiceAccount of its own")
			g.Expect(pod.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
			g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
			g.Expect(pod.Containers).To(HaveLen(1))
			c := pod.Containers[0]
			g.Expect(c.Args[:len(tc.args)]).To(Equal(tc.args))
			g.Expect(c.Args).To(ContainElements("--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"))
			g.Expect(c.SecurityContext.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
			g.Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
			g.Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
			g.Expect(c.SecurityContext.Capabilities.Add).To(BeEmpty())
			g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
			g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
			for _, p := range []intstr.IntOrString{c.LivenessProbe.HTTPGet.Port, c.ReadinessProbe.HTTPGet.Port} {
				g.Expect(p).To(Equal(intstr.FromString("probes")))
			}
			g.Expect(c.Ports).To(ContainElements(
				corev1.ContainerPort{Name: "metrics", ContainerPort: 8080},
				corev1.ContainerPort{Name: "probes", ContainerPort: 8081},
			))
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				g.Expect(c.Resources.Requests).To(HaveKey(r))
				g.Expect(c.Resources.Limits).To(HaveKey(r))
			}
			// The binary takes the Go runtime's soft memory limit from the container's
			// limit, with room for what Go does not count; a GOMEMLIMIT here would
			// override it with the whole limit.
			g.Expect(c.Env).NotTo(ContainElement(HaveField("Name", "GOMEMLIMIT")))

			// The metrics Service selects this Deployment's pods, and only them.
			services := typed[corev1.Service](g, objs, "Service")
			g.Expect(services).To(HaveLen(1))
			s := services[0]
			g.Expect(s.Spec.Ports).To(ConsistOf(HaveField("Port", BeEquivalentTo(8080))))
			g.Expect(s.Spec.Ports[0].TargetPort).To(Equal(intstr.FromString("metrics")))
			g.Expect(labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
			g.Expect(s.Spec.Selector).To(Equal(d.Spec.Selector.MatchLabels))

			// The ServiceAccount is bound cluster-wide to a ClusterRole that reads no
			// Secret or ConfigMap anywhere, and holds no Lease and records no core/v1
			// Event outside its own namespace.
			bindings := typed[rbacv1.ClusterRoleBinding](g, objs, "ClusterRoleBinding")
			g.Expect(bindings).To(HaveLen(1))
			g.Expect(bindings[0].Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: tc.deployment, Namespace: systemNamespace}))
			for _, r := range clusterRules(g, tc.dir, bindings[0].RoleRef.Name) {
				g.Expect(r.Resources).NotTo(ContainElements(ContainSubstring("secrets")), "cluster-wide rule %v", r)
				g.Expect(r.Resources).NotTo(ContainElements(ContainSubstring("configmaps")), "cluster-wide rule %v", r)
				g.Expect(r.Resources).NotTo(ContainElements(ContainSubstring("leases")), "cluster-wide rule %v", r)
				if slices.Contains(r.APIGroups, "") {
					g.Expect(r.Resources).NotTo(ContainElements(ContainSubstring("events")), "cluster-wide rule %v", r)
				}
			}
		})
	}
}

// clusterRules returns the rules of the ClusterRole name, rendered with dir (the core's
// ClusterRole) or with the provider overlay (each provider's own).
func clusterRules(g *WithT, dir, name string) []rbacv1.PolicyRule {
	objs, err := render(testenv.RepoPath(dir))
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range typed[rbacv1.ClusterRole](g, objs, "ClusterRole") {
		if r.Name == name {
			return r.Rules
		}
	}
	g.Expect(name).To(BeEmpty(), "the ClusterRole %s is not rendered with %s", name, dir)
	return nil
}

func TestAProviderReadsSecretsAndConfigMapsInTheProvidersNamespaceOnly(t *testing.T) {
	for _, class := range []string{"vsphere", "libvirt", "proxmox"} {
		t.Run(class, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := render(testenv.RepoPath("config/providers/" + class))
			g.Expect(err).NotTo(HaveOccurred())
			name := "banlieue-provider-" + class
			rules := map[string][]rbacv1.PolicyRule{}
			for _, r := range typed[rbacv1.Role](g, objs, "Role") {
				g.Expect(r.Name).To(Equal(name))
				rules[r.Namespace] = r.Rules
			}
			g.Expect(rules).To(Equal(map[string][]rbacv1.PolicyRule{
				providersNamespace: {{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get"}}},
				systemNamespace:    leaderElectionRules,
			}))
			bindings := typed[rbacv1.RoleBinding](g, objs, "RoleBinding")
			g.Expect(bindings).To(HaveLen(2))
			for _, b := range bindings {
				g.Expect(b.Namespace).To(BeElementOf(providersNamespace, systemNamespace))
				g.Expect(b.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}))
				g.Expect(b.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: name, Namespace: systemNamespace}))
			}
		})
	}
}

// leaderElectionRules are what leader election needs in the system namespace: its Lease,
// and the core/v1 Events it records on it.
var leaderElectionRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
}

func TestTheCoreControllerElectsALeaderInTheSystemNamespaceOnly(t *testing.T) {
	g := NewWithT(t)
	objs, err := render(testenv.RepoPath("config/default"))
	g.Expect(err).NotTo(HaveOccurred())
	roles := typed[rbacv1.Role](g, objs, "Role")
	g.Expect(roles).To(HaveLen(1))
	g.Expect(roles[0].Name).To(Equal(coreServiceAccount))
	g.Expect(roles[0].Namespace).To(Equal(systemNamespace))
	g.Expect(roles[0].Rules).To(Equal(leaderElectionRules))
	bindings := typed[rbacv1.RoleBinding](g, objs, "RoleBinding")
	g.Expect(bindings).To(HaveLen(1))
	g.Expect(bindings[0].Namespace).To(Equal(systemNamespace))
	g.Expect(bindings[0].RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: coreServiceAccount}))
	g.Expect(bindings[0].Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: coreServiceAccount, Namespace: systemNamespace}))
}

func TestUserDataGrantsTheProvidersSecretsInOneMoreNamespace(t *testing.T) {
	g := NewWithT(t)
	objs, err := renderUserData("tenant-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(2))
	roles := typed[rbacv1.Role](g, objs, "Role")
	g.Expect(roles).To(HaveLen(1))
	g.Expect(roles[0].Namespace).To(Equal("tenant-a"))
	g.Expect(roles[0].Rules).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}))
	bindings := typed[rbacv1.RoleBinding](g, objs, "RoleBinding")
	g.Expect(bindings).To(HaveLen(1))
	g.Expect(bindings[0].Namespace).To(Equal("tenant-a"))
	g.Expect(bindings[0].RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: roles[0].Name}))

	// Its subjects are the ServiceAccounts the provider overlays create, all of them.
	var accounts []rbacv1.Subject
	for _, class := range []string{"libvirt", "proxmox", "vsphere"} {
		objs, err := render(testenv.RepoPath("config/providers/" + class))
		g.Expect(err).NotTo(HaveOccurred())
		for _, sa := range typed[corev1.ServiceAccount](g, objs, "ServiceAccount") {
			accounts = append(accounts, rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace})
		}
	}
	g.Expect(bindings[0].Subjects).To(Equal(accounts))
}

func TestAnOverlayMovesTheProvidersNamespace(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	// kustomize takes a relative path to a base only.
	base, err := filepath.Rel(dir, testenv.RepoPath("config/providers/vsphere"))
	g.Expect(err).NotTo(HaveOccurred())
	kustomization := "resources:\n  - " + base + "\n" +
		"patches:\n  - target: { kind: Role|RoleBinding, namespace: infra }\n    patch: |-\n      - { op: replace, path: /metadata/namespace, value: datacenter-a }\n"
	g.Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600)).To(Succeed())
	objs, err := render(dir)
	g.Expect(err).NotTo(HaveOccurred())
	namespaces := map[string][]string{}
	for _, o := range objs {
		namespaces[o.GetKind()] = append(namespaces[o.GetKind()], o.GetNamespace())
	}
	for _, ns := range namespaces {
		slices.Sort(ns)
	}
	g.Expect(namespaces).To(Equal(map[string][]string{
		"Role":        {"banlieue-system", "datacenter-a"},
		"RoleBinding": {"banlieue-system", "datacenter-a"},
		"ClusterRole": {""}, "ClusterRoleBinding": {""},
		"ServiceAccount": {systemNamespace}, "Deployment": {systemNamespace}, "Service": {systemNamespace},
	}))
}
