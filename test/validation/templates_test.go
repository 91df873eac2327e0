package validation

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// topologyDryRunAnnotation is the annotation Cluster API's topology controller puts on
// the objects it sends in a server-side-apply dry run, so that webhooks can tell.
const topologyDryRunAnnotation = "topology.cluster.x-k8s.io/dry-run"

// machineTemplate is a machine template of kind with name, cpus and the backend block.
func machineTemplate(kind, name string, cpus int, backend string) string {
	return fmt.Sprintf(`
apiVersion: infrastructure.banlieue.io/v1alpha1
kind: %s
metadata:
  name: %s
spec:
  template:
    spec:
      providerRef: {namespace: infra, name: backend-1}
      image: {name: ubuntu-22-04, kind: Template, ref: ubuntu-2204-tpl}
      hardware: {cpus: %d, memoryMiB: 2048}
%s`, kind, name, cpus, backend)
}

// TestMachineTemplatesPassServerSideApplyDryRun checks what Cluster API's topology
// controller needs of an InfraMachineTemplate (the contract's "support for SSA dry
// run", mandatory for ClusterClass): a server-side-apply dry run, of a changed template
// or of a new one, is accepted and changes nothing stored; and a dry run of the stored
// template returns it unchanged, so the controller sees no difference to roll out.
// banlieue's templates have no webhook and no immutability rule, so nothing needs to
// tell a dry run apart.
func TestMachineTemplatesPassServerSideApplyDryRun(t *testing.T) {
	needAPIServer(t)
	for _, tc := range []struct{ kind, backend string }{
		{"VSphereMachineTemplate", "      vsphere: {folder: tenants/a, cloneMode: linked}\n"},
		{"LibvirtMachineTemplate", "      libvirt: {storagePool: default}\n"},
		{"ProxmoxMachineTemplate", "      proxmox: {pool: tenants}\n"},
	} {
		t.Run("A "+tc.kind+" passes a server-side-apply dry run.", func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			owner := client.FieldOwner("capi-topology")
			apply := func(manifest string, opts ...client.ApplyOption) *unstructured.Unstructured {
				t.Helper()
				u := fromYAML(t, manifest)
				u.SetAnnotations(map[string]string{topologyDryRunAnnotation: ""})
				g.Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), append(opts, owner, client.ForceOwnership)...)).To(Succeed())
				return u
			}
			name := "ssa-" + strings.ToLower(strings.TrimSuffix(tc.kind, "MachineTemplate"))
			stored := apply(machineTemplate(tc.kind, name, 2, tc.backend))
			deleteAtCleanup(t, stored)
			before := getLike(t, stored)

			changed := apply(machineTemplate(tc.kind, name, 4, tc.backend), client.DryRunAll)
			g.Expect(changed.GetUID()).To(Equal(before.GetUID()), "the dry run answers with the stored template")
			g.Expect(nestedPath(changed, "spec.template.spec.hardware.cpus")).To(BeEquivalentTo(4), "the dry run returns the changed template")
			after := getLike(t, stored)
			g.Expect(nestedPath(after, "spec.template.spec.hardware.cpus")).To(BeEquivalentTo(2), "a dry run changes nothing stored")
			g.Expect(after.GetResourceVersion()).To(Equal(before.GetResourceVersion()))

			same := apply(machineTemplate(tc.kind, name, 2, tc.backend), client.DryRunAll)
			g.Expect(same.Object["spec"]).To(Equal(before.Object["spec"]), "a dry run of the stored template returns it as stored")

			apply(machineTemplate(tc.kind, name+"-new", 2, tc.backend), client.DryRunAll)
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name + "-new"}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": stored.GetAPIVersion(), "kind": tc.kind}})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a dry run creates nothing, got %v", err)
		})
	}
}
