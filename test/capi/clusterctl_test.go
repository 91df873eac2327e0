package capi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/banlieue/banlieue/test/testenv"
)

// providerLabel is the label clusterctl puts on every object it installs for a provider.
const providerLabel = "cluster.x-k8s.io/provider"

// TestClusterctlInitInstallsBanlieueVSphere runs Cluster API's own clusterctl, built from
// the module, as a user would: 'clusterctl init --infrastructure banlieue-vsphere' from a
// local repository holding config/clusterctl's provider and the Cluster API release's
// own components rendered from the module. It runs against an API server of its own, as
// Cluster API's webhook configurations, which nothing serves here, would refuse the
// conformance suite's writes.
//
// What envtest cannot show: no pod runs, so clusterctl is told not to wait for the
// providers (--wait-providers=false) and cert-manager is only stood in for by its CRDs
// (testdata/cert-manager-standin.yaml), enough for clusterctl to find it installed. The
// test checks what clusterctl wrote, not that the Deployments become available.
func TestClusterctlInitInstallsBanlieueVSphere(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := &crenvtest.Environment{
		ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths:     []string{testenv.RepoPath("test/capi/testdata/cert-manager-standin.yaml")},
	}
	restCfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(restCfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiextensionsv1.AddToScheme(c.Scheme())).To(Succeed())
	admin, err := env.AddUser(crenvtest.User{Name: "clusterctl-user", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := admin.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, kubeconfig, 0o600)).To(Succeed())

	clusterctl := filepath.Join(capiAssets, "clusterctl")
	out, err := exec.Command(clusterctl, "version", "-o", "short").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	capiVersion := strings.TrimSpace(string(out))
	g.Expect(capiVersion).To(HavePrefix("v1."), "clusterctl reports the release it is built from")
	var chart struct {
		Version string `json:"version"`
	}
	data, err := os.ReadFile(testenv.RepoPath("charts/banlieue/Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.Unmarshal(data, &chart)).To(Succeed())
	banlieueVersion := "v" + chart.Version

	// The local repository: {base}/{provider label}/{version}/{components, metadata.yaml}.
	repo := filepath.Join(dir, "repository")
	layout := []struct {
		label, version, components, kustomization, metadata string
	}{
		{"cluster-api", capiVersion, "core-components.yaml", filepath.Join(capiAssets, "config/core/default"), filepath.Join(capiAssets, "metadata.yaml")},
		{"bootstrap-kubeadm", capiVersion, "bootstrap-components.yaml", filepath.Join(capiAssets, "config/bootstrap-kubeadm/default"), filepath.Join(capiAssets, "metadata.yaml")},
		{"control-plane-kubeadm", capiVersion, "control-plane-components.yaml", filepath.Join(capiAssets, "config/control-plane-kubeadm/default"), filepath.Join(capiAssets, "metadata.yaml")},
		{"infrastructure-banlieue-vsphere", banlieueVersion, "infrastructure-components.yaml", testenv.RepoPath("config/clusterctl/banlieue-vsphere"), testenv.RepoPath("config/clusterctl/metadata.yaml")},
	}
	urls := map[string]string{}
	for _, l := range layout {
		d := filepath.Join(repo, l.label, l.version)
		g.Expect(os.MkdirAll(d, 0o700)).To(Succeed())
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), l.kustomization)
		g.Expect(err).NotTo(HaveOccurred(), "render %s", l.kustomization)
		components, err := resources.AsYaml()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(d, l.components), components, 0o600)).To(Succeed())
		metadata, err := os.ReadFile(l.metadata)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(d, "metadata.yaml"), metadata, 0o600)).To(Succeed())
		urls[l.label] = "file://" + filepath.Join(d, l.components)
	}
	config := "providers:\n" +
		"  - {name: cluster-api, type: CoreProvider, url: " + urls["cluster-api"] + "}\n" +
		"  - {name: kubeadm, type: BootstrapProvider, url: " + urls["bootstrap-kubeadm"] + "}\n" +
		"  - {name: kubeadm, type: ControlPlaneProvider, url: " + urls["control-plane-kubeadm"] + "}\n" +
		"  - {name: banlieue-vsphere, type: InfrastructureProvider, url: " + urls["infrastructure-banlieue-vsphere"] + "}\n"
	configPath := filepath.Join(dir, "clusterctl.yaml")
	g.Expect(os.WriteFile(configPath, []byte(config), 0o600)).To(Succeed())

	cmd := exec.Command(clusterctl, "init", "--kubeconfig", kubeconfigPath, "--config", configPath,
		"--infrastructure", "banlieue-vsphere", "--wait-providers=false", "-v", "3")
	// clusterctl keeps its state under the home folder, and checks for a newer release
	// of itself over the network unless told not to. BANLIEUE_IMAGE is the components'
	// variable for the provider's image.
	const image = "localhost/banlieue:conformance"
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true",
		"BANLIEUE_IMAGE="+image)
	out, err = cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "clusterctl init:\n%s", out)
	t.Logf("clusterctl init:\n%s", out)
	g.Expect(string(out)).To(ContainSubstring("Skipping installing cert-manager as it is already installed"))

	// clusterctl's inventory names every provider it installed, with its version.
	inventory := &unstructured.UnstructuredList{}
	inventory.SetAPIVersion("clusterctl.cluster.x-k8s.io/v1alpha3")
	inventory.SetKind("ProviderList")
	g.Expect(c.List(ctx, inventory)).To(Succeed())
	installed := map[string]string{}
	for _, p := range inventory.Items {
		typ, _, _ := unstructured.NestedString(p.Object, "type")
		version, _, _ := unstructured.NestedString(p.Object, "version")
		installed[p.GetNamespace()+"/"+p.GetName()+" "+typ] = version
	}
	g.Expect(installed).To(HaveKeyWithValue("banlieue-system/infrastructure-banlieue-vsphere InfrastructureProvider", banlieueVersion))
	g.Expect(installed).To(HaveKeyWithValue("capi-system/cluster-api CoreProvider", capiVersion))

	// banlieue's CRDs, the provider's Deployment and the ClusterRole that aggregates into
	// Cluster API's manager role are installed, labelled as the provider's.
	for _, name := range []string{"vspheremachines.infrastructure.banlieue.io", "vspheremachinetemplates.infrastructure.banlieue.io", "providers.banlieue.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
		g.Expect(crd.Labels).To(HaveKeyWithValue(providerLabel, "infrastructure-banlieue-vsphere"))
	}
	deploy := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "banlieue-system", Name: "banlieue-provider-vsphere"}, deploy)).To(Succeed())
	g.Expect(deploy.Labels).To(HaveKeyWithValue(providerLabel, "infrastructure-banlieue-vsphere"))
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(ContainElements("provider", "vsphere"))
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
	role := &rbacv1.ClusterRole{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: capiManagerRole}, role)).To(Succeed())
	g.Expect(role.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/aggregate-to-manager", "true"))
	g.Expect(role.Labels).To(HaveKeyWithValue(providerLabel, "infrastructure-banlieue-vsphere"))
	// The Role that reads the Providers' Secrets is in the provider's namespace, bound to
	// its ServiceAccount there.
	binding := &rbacv1.RoleBinding{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "banlieue-system", Name: "banlieue-provider-vsphere-providers"}, binding)).To(Succeed())
	g.Expect(binding.Subjects).To(ContainElement(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "banlieue-provider-vsphere", Namespace: "banlieue-system"}))
}

// capiManagerRole is the ClusterRole that aggregates into Cluster API's manager role.
const capiManagerRole = "banlieue-capi-manager"

// TestClusterctlComponentsFitOneNamespace: clusterctl moves every namespaced object of a
// provider's components into its one target namespace, so each banlieue provider's
// components have one Namespace, no two namespaced objects that would then share a kind
// and name, and the image as the clusterctl variable BANLIEUE_IMAGE.
func TestClusterctlComponentsFitOneNamespace(t *testing.T) {
	for _, provider := range []string{"banlieue-vsphere", "banlieue-libvirt", "banlieue-proxmox"} {
		t.Run(provider, func(t *testing.T) {
			g := NewWithT(t)
			resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), testenv.RepoPath("config/clusterctl/"+provider))
			g.Expect(err).NotTo(HaveOccurred())
			var namespaces, images []string
			seen := map[string]string{}
			for _, r := range resources.Resources() {
				switch r.GetKind() {
				case "Namespace":
					namespaces = append(namespaces, r.GetName())
				case "Deployment":
					containers, err := r.GetSlice("spec.template.spec.containers")
					g.Expect(err).NotTo(HaveOccurred())
					for _, c := range containers {
						images = append(images, c.(map[string]any)["image"].(string))
					}
				}
				if ns := r.GetNamespace(); ns != "" {
					key := r.GetKind() + "/" + r.GetName()
					g.Expect(seen).NotTo(HaveKey(key), "%s is in %s and %s: clusterctl would install both into one namespace", key, seen[key], ns)
					seen[key] = ns
				}
			}
			g.Expect(namespaces).To(Equal([]string{"banlieue-system"}))
			g.Expect(images).To(Equal([]string{"${BANLIEUE_IMAGE:=localhost/banlieue:latest}"}))
		})
	}
}
