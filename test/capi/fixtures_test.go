package capi

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/testenv"
)

var seq atomic.Int64

// Cluster API's group and version, and the kinds the tests write.
const (
	capiAPIVersion      = "cluster.x-k8s.io/v1beta2"
	clusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	deploymentNameLabel = "cluster.x-k8s.io/deployment-name"
)

// fixture is one test's namespace and clients.
type fixture struct {
	t   testing.TB
	g   *WithT
	ctx context.Context
	ns  string
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	managerRunning(tb)
	f := &fixture{t: tb, g: NewWithT(tb), ctx: context.Background(), ns: fmt.Sprintf("capi-%d", seq.Add(1))}
	f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})
	return f
}

func (f *fixture) create(o client.Object) {
	f.t.Helper()
	f.g.Expect(k8s.Create(f.ctx, o)).To(Succeed(), "create %T %s", o, o.GetName())
}

// startProvider runs a provider controller in a manager of its own until the test ends,
// as a provider process would run.
func (f *fixture) startProvider(c providersdk.Config) {
	f.t.Helper()
	testenv.StartProvider(f.t, cfg, c)
}

// image creates a VMImage with sources; the machines' spec.image must be its source.
func (f *fixture) image(sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	f.t.Helper()
	img := builder.VMImage(f.ns+"-image", sources...)
	f.create(img)
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), img) })
	return img
}

// machineSpec is a small machine on p from img, with no failure domain: a template's spec,
// which Cluster API's Machine completes with its own failure domain.
func machineSpec(p *banlieuev1.Provider, img *banlieuev1.VMImage) infrav1.MachineSpec {
	src := img.SourceFor(p.Spec.ProviderClassRef.Name)
	return infrav1.MachineSpec{
		ProviderRef: infrav1.ProviderRef{Namespace: p.Namespace, Name: p.Name},
		Image:       infrav1.MachineImage{Name: img.Name, Kind: src.Kind, Ref: src.Ref},
		Hardware:    infrav1.MachineHardware{CPUs: 1, MemoryMiB: 512},
		Disks:       []infrav1.MachineDisk{{Name: "root", SizeGiB: 20, StorageClass: "fast", Target: p.StorageClass("fast").Target}},
		Interfaces:  []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: p.NetworkClass("prod").Target}},
		PowerState:  banlieuev1.PowerStatePoweredOn,
	}
}

// capi builds a Cluster API object from YAML, in the test's namespace.
func (f *fixture) capi(kind, name, spec string, args ...any) *unstructured.Unstructured {
	f.t.Helper()
	o := &unstructured.Unstructured{}
	f.g.Expect(yaml.Unmarshal([]byte(fmt.Sprintf(spec, args...)), &o.Object)).To(Succeed(), "the test's %s YAML", kind)
	o.SetAPIVersion(capiAPIVersion)
	o.SetKind(kind)
	o.SetNamespace(f.ns)
	o.SetName(name)
	return o
}

// cluster creates a Cluster with neither infrastructureRef nor controlPlaneRef, which
// Cluster API then marks as infrastructure provisioned on its own.
func (f *fixture) cluster(name string) *unstructured.Unstructured {
	f.t.Helper()
	// spec needs a property: paused, false, is one a Cluster without refs has.
	c := f.capi("Cluster", name, "spec: {paused: false}")
	f.create(c)
	f.eventuallyCAPI(c, func(g Gomega, c *unstructured.Unstructured) {
		provisioned, _, _ := unstructured.NestedBool(c.Object, "status", "initialization", "infrastructureProvisioned")
		g.Expect(provisioned).To(BeTrue(), "Cluster %s status.initialization.infrastructureProvisioned", name)
	}, 30*time.Second)
	return c
}

// bootstrapSecret creates a Cluster API bootstrap data Secret, as a bootstrap provider
// writes one.
func (f *fixture) bootstrapSecret(cluster, name, data string) {
	f.t.Helper()
	f.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{clusterNameLabel: cluster}},
		Type:       banlieuev1.ClusterAPIBootstrapSecretType,
		Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
	})
}

// machine creates a Cluster API Machine of cluster on the infrastructure machine kind/name,
// with the bootstrap data Secret dataSecret and failure domain fd ("" for none), with the
// label and deletion timeout Cluster API's defaulting webhook would set.
func (f *fixture) machine(cluster, name, kind, infra, dataSecret, fd string) *unstructured.Unstructured {
	f.t.Helper()
	m := f.capi("Machine", name, `
metadata:
  labels: {%q: %q}
spec:
  clusterName: %q
  bootstrap: {dataSecretName: %q}
  infrastructureRef: {apiGroup: %q, kind: %q, name: %q}
  deletion: {nodeDeletionTimeoutSeconds: 10}
`, clusterNameLabel, cluster, cluster, dataSecret, infrav1.GroupVersion.Group, kind, infra)
	if fd != "" {
		f.g.Expect(unstructured.SetNestedField(m.Object, fd, "spec", "failureDomain")).To(Succeed())
	}
	f.create(m)
	return m
}

// machineDeployment creates a MachineDeployment of cluster with replicas Machines in
// failure domain fd, from the VSphereMachineTemplate workerTemplate, each with
// the bootstrap data Secret dataSecret, and with the selector, labels, strategy and
// timeouts Cluster API's defaulting webhook would set.
func (f *fixture) machineDeployment(cluster, name string, replicas int, fd, dataSecret string) *unstructured.Unstructured {
	f.t.Helper()
	md := f.capi("MachineDeployment", name, `
metadata:
  labels: {%[1]q: %[2]q}
spec:
  clusterName: %[2]q
  replicas: %[3]d
  selector:
    matchLabels: {%[1]q: %[2]q, %[4]q: %[5]q}
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {%[1]q: %[2]q, %[4]q: %[5]q}
    spec:
      clusterName: %[2]q
      failureDomain: %[6]q
      bootstrap: {dataSecretName: %[7]q}
      infrastructureRef: {apiGroup: %[8]q, kind: %[9]q, name: %[10]q}
      deletion: {nodeDeletionTimeoutSeconds: 10}
`, clusterNameLabel, cluster, replicas, deploymentNameLabel, name, fd, dataSecret, infrav1.GroupVersion.Group, "VSphereMachineTemplate", workerTemplate)
	f.create(md)
	return md
}

// scale sets a MachineDeployment's replicas.
func (f *fixture) scale(md *unstructured.Unstructured, replicas int) {
	f.t.Helper()
	f.g.Expect(k8s.Patch(f.ctx, md, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)))).To(Succeed())
}

// machines lists the test namespace's Cluster API Machines with the labels.
func (f *fixture) machines(g Gomega, labels map[string]string) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(capiAPIVersion)
	list.SetKind("MachineList")
	g.Expect(k8s.List(f.ctx, list, client.InNamespace(f.ns), client.MatchingLabels(labels))).To(Succeed())
	return list.Items
}

// eventuallyCAPI re-reads the Cluster API object o until check passes.
func (f *fixture) eventuallyCAPI(o *unstructured.Unstructured, check func(g Gomega, o *unstructured.Unstructured), timeout time.Duration) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		managerRunning(f.t)
		g.Expect(k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		check(g, o)
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// eventually re-reads o until check passes, for up to 30 seconds.
func (f *fixture) eventually(o client.Object, check func(g Gomega)) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		check(g)
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// gone waits until o no longer exists.
func (f *fixture) gone(o client.Object, timeout time.Duration) {
	f.t.Helper()
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o))
	}).WithTimeout(timeout).WithPolling(200*time.Millisecond).Should(BeTrue(), "%T %s still exists", o, o.GetName())
}

// provisioned checks what Cluster API reports of a Machine whose infrastructure is
// ready: phase Provisioned (not Running: envtest has no Node, see the package comment),
// a providerID with prefix, infrastructure provisioned, and its failure domain fd.
func provisioned(g Gomega, m *unstructured.Unstructured, prefix, fd string) {
	phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
	g.Expect(phase).To(Equal("Provisioned"), "Machine %s phase; conditions %v", m.GetName(), conditions(m))
	id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
	g.Expect(id).To(HavePrefix(prefix), "Machine %s spec.providerID", m.GetName())
	ready, _, _ := unstructured.NestedBool(m.Object, "status", "initialization", "infrastructureProvisioned")
	g.Expect(ready).To(BeTrue(), "Machine %s status.initialization.infrastructureProvisioned", m.GetName())
	got, _, _ := unstructured.NestedString(m.Object, "spec", "failureDomain")
	g.Expect(got).To(Equal(fd), "Machine %s spec.failureDomain", m.GetName())
}

// conditions is a Cluster API object's conditions, as type=status/reason, for messages.
func conditions(o *unstructured.Unstructured) string {
	list, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	out := make([]string, 0, len(list))
	for _, c := range list {
		m, _ := c.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v/%v %v", m["type"], m["status"], m["reason"], m["message"]))
	}
	return strings.Join(out, "; ")
}

// addresses is a Cluster API Machine's status.addresses as type/address.
func addresses(m *unstructured.Unstructured) []string {
	list, _, _ := unstructured.NestedSlice(m.Object, "status", "addresses")
	out := make([]string, 0, len(list))
	for _, a := range list {
		am, _ := a.(map[string]any)
		out = append(out, fmt.Sprintf("%v/%v", am["type"], am["address"]))
	}
	return out
}

// infraName is the name of a Machine's infrastructure machine.
func infraName(m *unstructured.Unstructured) string {
	n, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
	return n
}

// conditionOf returns "Status/Reason: Message" of the condition t, or "".
func conditionOf(conditions []metav1.Condition, t string) string {
	for _, c := range conditions {
		if c.Type == t {
			return string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
	}
	return ""
}

// clusterOf is the name of the compute cluster the VM's host is in, read from vcsim.
func clusterOf(g Gomega, c *vim25.Client, vm mo.VirtualMachine) string {
	ctx := context.Background()
	g.Expect(vm.Runtime.Host).NotTo(BeNil(), "VM %s has no host", vm.Name)
	var host mo.HostSystem
	g.Expect(object.NewHostSystem(c, *vm.Runtime.Host).Properties(ctx, *vm.Runtime.Host, []string{"parent"}, &host)).To(Succeed())
	g.Expect(host.Parent).NotTo(BeNil())
	g.Expect(host.Parent.Type).To(Equal("ClusterComputeResource"), "the parent of VM %s's host", vm.Name)
	var cluster mo.ClusterComputeResource
	g.Expect(object.NewClusterComputeResource(c, *host.Parent).Properties(ctx, *host.Parent, []string{"name"}, &cluster)).To(Succeed())
	return cluster.Name
}
