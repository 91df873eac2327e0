package e2e

import (
	"context"
	"encoding/xml"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/proxmoxer"
)

// The tests of section 6 (orphans) of docs/proposals/20261204-day-2-operations.md: a VM
// whose machine lost its finalizer by hand while its provider was down is reported on
// the Provider, left alone under orphanPolicy Report, and deleted under Delete; a VM
// another cluster marked on the same backend is neither counted nor touched. A witness
// outside banlieue (govmomi, the PVE API, virsh) checks the backend.

// orphanScan is the orphan scan interval of these tests' providers.
const orphanScan = time.Second

// orphanBackend is what the orphan test needs of one backend.
type orphanBackend struct {
	// config is the provider, with a short orphan scan.
	config providersdk.Config
	// kind is its machine kind.
	kind string
	// provider creates the test's Provider; class and image make VMs on it.
	provider func(f *fixture) *banlieuev1.Provider
	class    func(f *fixture) *banlieuev1.VMClass
	image    func(f *fixture) *banlieuev1.VMImage
	// cluster reads, with the backend's own API, the cluster the mark of the VM id
	// names; "" when the VM is gone.
	cluster func(g Gomega, id string) string
	// foreign marks a VM of the backend as another cluster's machine's, with the
	// backend's own API, and returns its provider ID.
	foreign func(g Gomega) string
	// leftovers lists, with the backend's own API, what of the machine uid's VM is left
	// once the VM is gone (volumes, seeds); nil when the backend has nothing beside it.
	leftovers func(g Gomega, uid string) []string
}

// clusterID is the UID of the test cluster's kube-system namespace.
func (f *fixture) clusterID() string {
	f.t.Helper()
	ns := &corev1.Namespace{}
	f.g.Expect(k8s.Get(f.ctx, client.ObjectKey{Name: providersdk.ClusterNamespace}, ns)).To(Succeed())
	return string(ns.UID)
}

// runOrphanTest is the orphan test on one backend.
func runOrphanTest(f *fixture, b orphanBackend) {
	f.t.Helper()
	stop := f.startProvider(b.config)
	p := b.provider(f)
	foreign := b.foreign(f.g)
	vm := f.vm("lost", b.class(f), b.image(f))
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning)) }, 2*time.Minute)
	id := vm.Status.ProviderID
	f.g.Expect(b.cluster(f.g, id)).To(Equal(f.clusterID()), "the VM's mark does not name this cluster")
	machine := &unstructured.Unstructured{}
	machine.SetGroupVersionKind(infrav1.GroupVersion.WithKind(b.kind))
	f.g.Expect(k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: vm.Name}, machine)).To(Succeed())
	uid := machine.GetUID()
	if b.leftovers != nil {
		f.g.Expect(b.leftovers(f.g, string(uid))).NotTo(BeEmpty(), "the witness sees none of the VM's volumes")
	}

	// While the provider is down, its finalizer is removed by hand and the VM deleted:
	// the machine goes, its backend VM stays.
	stop()
	f.g.Expect(k8s.Patch(f.ctx, machine, client.RawPatch(client.Merge.Type(), []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), &banlieuev1.VirtualMachine{}))
	}).WithTimeout(30*time.Second).Should(BeTrue(), "the VirtualMachine is still there")

	// Report, the default: counted, named, and left on the backend scan after scan.
	f.startProvider(b.config)
	f.eventually(p, func(g Gomega) {
		g.Expect(p.Status.Orphans.Count).To(Equal(int32(1)), "orphans: %+v", p.Status.Orphans)
		g.Expect(p.Status.Orphans.VMs[0].ProviderID).To(Equal(id))
		g.Expect(p.Status.Orphans.VMs[0].Machine).To(HaveSuffix(string(uid)))
		g.Expect(p.Status.SupportedOperations).To(ContainElement(banlieuev1.ProviderOperationReportOrphans))
	}, 30*time.Second)
	time.Sleep(3 * orphanScan)
	f.g.Expect(b.cluster(f.g, id)).NotTo(BeEmpty(), "orphanPolicy Report deleted the VM")

	// Delete: the VM goes, with an Event; the other cluster's VM stays, never counted.
	f.update(p, func() { p.Spec.OrphanPolicy = banlieuev1.OrphanPolicyDelete })
	f.g.Eventually(func() string { return b.cluster(f.g, id) }).WithTimeout(time.Minute).WithPolling(time.Second).
		Should(BeEmpty(), "orphanPolicy Delete left the VM")
	f.eventually(p, func(g Gomega) { g.Expect(p.Status.Orphans.Count).To(BeZero()) }, 30*time.Second)
	if b.leftovers != nil {
		f.g.Expect(b.leftovers(f.g, string(uid))).To(BeEmpty(), "what the orphan's deletion left behind")
	}
	f.g.Eventually(func(g Gomega) {
		e, ok := eventsOn(g, "Provider", p.Namespace, p.Name)[banlieuev1.ProviderOrphanDeletedReason]
		g.Expect(ok).To(BeTrue(), "no OrphanDeleted Event on the Provider")
		g.Expect(e.Note).To(ContainSubstring(id))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	f.g.Expect(b.cluster(f.g, foreign)).To(Equal("another-cluster"), "the other cluster's VM was touched")
}

func TestAVCenterOrphanIsReportedThenDeletedButNeverAnotherClusters(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	config := vsphereConfig(nil)
	config.OrphanScanInterval = orphanScan
	runOrphanTest(f, orphanBackend{
		config:   config,
		kind:     "VSphereMachine",
		provider: func(f *fixture) *banlieuev1.Provider { return f.vsphereProvider(vs) },
		class:    func(f *fixture) *banlieuev1.VMClass { return f.class("small") },
		image: func(f *fixture) *banlieuev1.VMImage {
			return f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName))
		},
		cluster: func(g Gomega, id string) string {
			vms, err := vs.VMs(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			for _, vm := range vms {
				if vm.Config != nil && "vsphere://"+vm.Config.Uuid == id {
					return vspheretest.ExtraConfig(vm, vsphere.ExtraConfigClusterUID)
				}
			}
			return ""
		},
		foreign: func(g Gomega) string {
			vm := vcsimVM(g, vs, "DC0_H0_VM1")
			ctx := context.Background()
			task, err := object.NewVirtualMachine(vs.Client.Client, vm.Self).Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: []types.BaseOptionValue{
				&types.OptionValue{Key: vsphere.ExtraConfigMachineUID, Value: uuid.NewString()},
				&types.OptionValue{Key: vsphere.ExtraConfigClusterUID, Value: "another-cluster"},
			}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(task.Wait(ctx)).To(Succeed())
			return "vsphere://" + vm.Config.Uuid
		},
	})
}

func TestAProxmoxOrphanIsReportedThenDeletedButNeverAnotherClusters(t *testing.T) {
	proxmoxer.Require(t)
	f := newFixture(t)
	pve := startPVE(t)
	api := pveAPI(pve)
	config := proxmoxConfig()
	config.OrphanScanInterval = orphanScan
	// cluster reads the cluster tag of the VM id from the PVE API's guest listing.
	cluster := func(g Gomega, id string) string {
		var all []struct {
			VMID int    `json:"vmid"`
			Tags string `json:"tags"`
		}
		g.Expect(api.Get(context.Background(), "/cluster/resources?type=vm", &all)).To(Succeed())
		for _, r := range all {
			if "proxmox://"+proxmoxtest.Cluster+"/"+strconv.Itoa(r.VMID) == id {
				for _, tag := range pveTags(r.Tags) {
					if c, ok := strings.CutPrefix(tag, proxmox.ClusterTagPrefix); ok {
						return c
					}
				}
				return "(no cluster tag)"
			}
		}
		return ""
	}
	witnessed := false
	runOrphanTest(f, orphanBackend{
		config:   config,
		kind:     "ProxmoxMachine",
		provider: func(f *fixture) *banlieuev1.Provider { return f.proxmoxProvider(pve) },
		class:    func(f *fixture) *banlieuev1.VMClass { return f.class("small") },
		image: func(f *fixture) *banlieuev1.VMImage {
			return f.image("ubuntu", builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName))
		},
		cluster: func(g Gomega, id string) string {
			c := cluster(g, id)
			if c != "" && c != "another-cluster" && !witnessed {
				// python3-proxmoxer reads the same tags as the listing, once, while the VM
				// is sure to be there (a read of a VM deleted meanwhile fails the test).
				witnessed = true
				vmid, err := strconv.Atoi(id[strings.LastIndex(id, "/")+1:])
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pveTags(proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, vmid).Tags)).To(ContainElement(proxmox.ClusterTagPrefix + c))
			}
			return c
		},
		foreign: func(g Gomega) string {
			var next string
			g.Expect(api.Get(context.Background(), "/cluster/nextid", &next)).To(Succeed())
			var upid string
			g.Expect(api.Post(context.Background(), "/nodes/"+proxmoxtest.Node1+"/qemu", map[string]any{
				"vmid": strings.TrimSpace(next), "name": "theirs", "cores": 1, "memory": 512,
				"tags": proxmox.TagPrefix + uuid.NewString() + ";" + proxmox.ClusterTagPrefix + "another-cluster",
			}, &upid)).To(Succeed())
			pveWaitTask(g, api, upid)
			return "proxmox://" + proxmoxtest.Cluster + "/" + strings.TrimSpace(next)
		},
	})
}

func TestALibvirtOrphanIsReportedThenDeletedButNeverAnotherClusters(t *testing.T) {
	f := newFixture(t)
	d := startLibvirtd(t)
	config := libvirtConfig()
	config.OrphanScanInterval = orphanScan
	runOrphanTest(f, orphanBackend{
		config:   config,
		kind:     "LibvirtMachine",
		provider: func(f *fixture) *banlieuev1.Provider { return f.libvirtProvider(d) },
		class:    func(f *fixture) *banlieuev1.VMClass { return f.class("small") },
		image: func(f *fixture) *banlieuev1.VMImage {
			return f.image("jammy", builder.BackingFile(libvirt.ProviderClass, lvPool+"/"+lvImage))
		},
		// virsh reads the cluster from banlieue's element of the domain's persistent
		// definition; "" once the domain is gone.
		cluster: func(g Gomega, id string) string {
			out, err := d.Virsh("metadata", id[strings.LastIndex(id, "/")+1:], "--uri", libvirt.MetadataNamespace, "--config")
			if err != nil {
				g.Expect(err.Error()).To(Or(ContainSubstring("failed to get domain"), ContainSubstring("Domain not found")), "virsh metadata")
				return ""
			}
			var el struct {
				Cluster string `xml:"cluster"`
			}
			g.Expect(xml.Unmarshal([]byte(out), &el)).To(Succeed())
			return el.Cluster
		},
		foreign: func(g Gomega) string {
			_, id := defineRunningDomain(t, d)
			_, err := d.Virsh("metadata", id, "--uri", libvirt.MetadataNamespace, "--key", "banlieue", "--config", "--set",
				"<machine><uid>"+uuid.NewString()+"</uid><cluster>another-cluster</cluster></machine>")
			g.Expect(err).NotTo(HaveOccurred())
			return "libvirt://" + strings.TrimSpace(lvMustVirsh(t, d, "hostname")) + "/" + id
		},
		leftovers: func(g Gomega, uid string) []string {
			var out []string
			for _, v := range volumes(g, d) {
				if strings.HasPrefix(v, uid) {
					out = append(out, v)
				}
			}
			return out
		},
	})
}
