package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	"github.com/banlieue/banlieue/test/proxmoxer"
	"github.com/banlieue/banlieue/test/testenv"
)

// startPVE starts a simulated cluster with the bridges the test classes use and guest
// agents that answer soon after start.
func startPVE(t *testing.T, opts ...proxmoxtest.Option) *proxmoxtest.Simulator {
	t.Helper()
	return proxmoxtest.Start(t, append([]proxmoxtest.Option{func(o *proxmoxsim.Options) {
		o.Bridges = []string{proxmoxtest.Bridge, "vmbr1"}
		o.GuestAgentDelay = 200 * time.Millisecond
	}}, opts...)...)
}

// proxmoxConfig is the Proxmox provider with intervals short enough for tests. It has
// no snippet writer, as most installations: user data goes up as a seed ISO.
func proxmoxConfig() providersdk.Config {
	c := proxmox.Config(proxmox.WithShutdownTimeout(2 * time.Second))
	c.InventoryInterval, c.ImageResync = 2*time.Second, 2*time.Second
	c.MachineOptions = append(c.MachineOptions, testenv.FastMachineOptions()...)
	return c
}

// proxmoxProvider creates a Provider for the simulator pve, on node pve1 (where the
// template's local storage is), with its API-token Secret.
func (f *fixture) proxmoxProvider(pve *proxmoxtest.Simulator, mods ...func(*banlieuev1.Provider, *corev1.Secret)) *banlieuev1.Provider {
	f.t.Helper()
	secret := pve.TokenCredentialsSecret(f.ns, "pve")
	return f.provider(builder.Provider(f.ns, "pve", proxmox.ProviderClass,
		builder.WithConnection(pve.Connection(secret.Name)),
		builder.WithTestClasses("storage", proxmoxtest.Storage, "bridge", proxmoxtest.Bridge, "vmbr1"),
		// The image servers of the import tests listen on loopback.
		builder.WithParameters(map[string]string{"node": proxmoxtest.Node1, providersdk.ParamAllowLoopbackImports: "true"}),
	), secret, mods...)
}

// vmid is the Proxmox VMID of the VM's machine, once the provider has reported it.
func (f *fixture) vmid(name string) int {
	f.t.Helper()
	m := &infrav1.ProxmoxMachine{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m)).To(Succeed())
		g.Expect(m.Status.Proxmox).NotTo(BeNil())
		g.Expect(m.Status.Proxmox.VMID).NotTo(BeZero())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return int(m.Status.Proxmox.VMID)
}

var diskSize = regexp.MustCompile(`size=(\d+G)`)

func TestAVirtualMachineLivesItsWholeLifeOnProxmox(t *testing.T) {
	f := newFixture(t)
	pve := startPVE(t)
	f.startProvider(proxmoxConfig())
	p := f.proxmoxProvider(pve)
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: "))
		g.Expect(p.Status.FailureDomains).To(HaveLen(1))
	}, 30*time.Second)

	userData := "#cloud-config\nhostname: web-1\n"
	f.create(builder.UserDataSecret(f.ns, "cloud-init", map[string][]byte{"user-data": []byte(userData)}))
	class := f.class("small")
	vm := f.vm("web-1", class, f.image("ubuntu", builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName)), func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}}
		// The VM follows its class: the edits of the class below resize it.
		vm.Spec.ClassUpdatePolicy = banlieuev1.ClassUpdatePolicyFollow
	})
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
		g.Expect(vm.Status.Addresses).NotTo(BeEmpty())
	}, 60*time.Second)
	id := f.vmid("web-1")
	f.g.Expect(vm.Status.ProviderID).To(Equal(fmt.Sprintf("proxmox://%s/%d", proxmoxtest.Cluster, id)))

	// The VM on the cluster is shaped as its class says, with its user data on a NoCloud
	// seed ISO uploaded to the node's iso storage and attached as a CD-ROM.
	conf, ok := pve.VM(id)
	f.g.Expect(ok).To(BeTrue())
	f.g.Expect(conf).To(HaveKeyWithValue("cores", "2"))
	f.g.Expect(conf).To(HaveKeyWithValue("memory", "2048"))
	f.g.Expect(conf["net0"]).To(ContainSubstring("bridge=" + proxmoxtest.Bridge))
	f.g.Expect(conf["net1"]).To(ContainSubstring("bridge=vmbr1"))
	f.g.Expect(diskSize.FindStringSubmatch(conf["scsi0"])).To(ContainElement("20G"))
	f.g.Expect(diskSize.FindStringSubmatch(conf["scsi1"])).To(ContainElement("5G"))
	uid := f.machineUIDOf("ProxmoxMachine", vm.Name)
	f.g.Expect(conf["description"]).To(ContainSubstring(uid))
	volid, _, _ := strings.Cut(conf["ide2"], ",")
	f.g.Expect(volid).To(HavePrefix("local:iso/banlieue-" + uid + "-"))
	f.g.Expect(conf["ide2"]).To(HaveSuffix(",media=cdrom"))
	iso, ok := pve.Volume(proxmoxtest.Node1, volid)
	f.g.Expect(ok).To(BeTrue(), "seed %s", volid)
	files, label, err := nocloud.ReadISO(iso)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(label).To(Equal("cidata"))
	f.g.Expect(string(files["user-data"])).To(Equal(userData))
	f.g.Expect(string(files["meta-data"])).To(ContainSubstring(uid))

	// Power off and on.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff)) }, 30*time.Second)
	f.update(class, func() { class.Spec.Hardware.CPUs = 4 })
	f.g.Eventually(func() string { c, _ := pve.VM(id); return c["cores"] }).WithTimeout(30 * time.Second).Should(Equal("4"))
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn)) }, 30*time.Second)

	// Deleting the VM leaves nothing on the cluster.
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), vm)) }).WithTimeout(60 * time.Second).Should(BeTrue())
	_, ok = pve.VM(id)
	f.g.Expect(ok).To(BeFalse(), "VM %d is still on the cluster", id)
	_, ok = pve.Volume(proxmoxtest.Node1, volid)
	f.g.Expect(ok).To(BeFalse(), "seed %s is still on the node", volid)
}

func TestAProxmoxVMWithHotplugGrowsWhileItRuns(t *testing.T) {
	proxmoxer.Require(t)
	f := newFixture(t)
	pve := startPVE(t)
	f.startProvider(proxmoxConfig())
	p := f.proxmoxProvider(pve, func(p *banlieuev1.Provider, _ *corev1.Secret) {
		p.Spec.Parameters[providersdk.ParamHotplug] = "cpu,memory"
	})
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
	class := f.class("small")
	vm := f.vm("web-1", class, f.image("ubuntu", builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName)), func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.ClassUpdatePolicy = banlieuev1.ClassUpdatePolicyFollow
	})
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	}, 60*time.Second)
	id := f.vmid("web-1")

	// proxmoxer, a client banlieue did not write, reads the headroom the VM was made
	// with: CPU and memory hotplug besides PVE's defaults, cores four times the class's
	// CPUs, the class's 2 present as vcpus, NUMA for memory hotplug.
	made := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, id)
	t.Logf("proxmoxer reads the new VM: %+v", made)
	headroom := map[string]string{"hotplug": "network,disk,usb,cpu,memory", "cores": "8", "sockets": "1", "vcpus": "2", "numa": "1", "memory": "2048"}
	f.g.Expect(made.Current).To(Equal(headroom))
	f.g.Expect(made.Status).To(Equal("running"))

	// The class grows to 4 CPUs and 4 GiB while the VM runs: within its cores and on
	// PVE's DIMM steps, so PVE hotplugs both at once, in the same QEMU process, and
	// nothing is left pending.
	f.update(class, func() { class.Spec.Hardware.CPUs, class.Spec.Hardware.MemoryMiB = 4, 4096 })
	f.eventually(vm, func(g Gomega) {
		g.Expect([]int64{int64(vm.Status.Hardware.CPUs), vm.Status.Hardware.MemoryMiB}).To(Equal([]int64{4, 4096}))
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("False/NoPendingChange: "))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, 30*time.Second)
	grown := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, id)
	t.Logf("proxmoxer reads the grown VM: %+v", grown)
	headroom["vcpus"], headroom["memory"] = "4", "4096"
	f.g.Expect(grown.Current).To(Equal(headroom), "the running VM was not grown")
	f.g.Expect(grown.Hardware).To(Equal(headroom), "GET config shows other values pending")
	f.g.Expect(grown.Pending).To(BeEmpty())
	f.g.Expect(grown.PendingDelete).To(BeEmpty())
	f.g.Expect(grown.PID).To(Equal(made.PID), "the growth restarted the VM")

	// 12 CPUs are beyond its 8 cores: the change waits for the next restart, the VM
	// stays Ready and says so, and PVE holds nothing pending for it.
	f.update(class, func() { class.Spec.Hardware.CPUs = 12 })
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("True/HardwareChangePending: the VM's next restart applies " +
			"CPUs from 4 to 12; set spec.restartRequestedAt, or power the VM off and on again"))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, 30*time.Second)
	waiting := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, id)
	f.g.Expect(waiting.Current).To(Equal(headroom))
	f.g.Expect(waiting.Pending).To(BeEmpty())
	f.g.Expect(waiting.PID).To(Equal(made.PID))

	// A restart applies it: the cores are raised to the new bound, no more than the
	// node's 16 CPUs, and the VM runs 12 of them in a new QEMU process.
	f.update(vm, func() { vm.Spec.RestartRequestedAt = &metav1.Time{Time: time.Now()} })
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted), "the restart has not ended: %+v", vm.Status.Restart)
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("False/NoPendingChange: "))
		g.Expect(vm.Status.Hardware.CPUs).To(Equal(int32(12)))
	}, 60*time.Second)
	restarted := proxmoxer.ReadVM(t, pve.Simulator, proxmoxtest.Node1, id)
	t.Logf("proxmoxer reads the restarted VM: %+v", restarted)
	headroom["cores"], headroom["vcpus"] = "16", "12"
	f.g.Expect(restarted.Current).To(Equal(headroom))
	f.g.Expect(restarted.Pending).To(BeEmpty())
	f.g.Expect(restarted.Status).To(Equal("running"))
	f.g.Expect(restarted.PID).NotTo(Equal(made.PID), "the restart did not start a new QEMU process")
}

func TestAProxmoxProviderSaysWhatIsWrongAndRecovers(t *testing.T) {
	f := newFixture(t)
	pve := startPVE(t)
	f.startProvider(proxmoxConfig())
	p := f.proxmoxProvider(pve, func(p *banlieuev1.Provider, s *corev1.Secret) {
		s.Data["tokenSecret"] = []byte("wrong")
		delete(p.Spec.Parameters, "node") // every online node is a failure domain
	})
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "CredentialsValid")).To(HavePrefix("False/CredentialsRejected: "))
	}, 30*time.Second)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "pve"}}
	f.update(secret, func() { secret.Data["tokenSecret"] = []byte(pve.TokenSecret) })
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: "))
		g.Expect(failureDomainNames(p)).To(ConsistOf(proxmoxtest.Node1, proxmoxtest.Node2))
	}, 30*time.Second)

	// A node that goes offline stops being a failure domain, and comes back with it.
	f.g.Expect(pve.SetNodeOnline(proxmoxtest.Node2, false)).To(Succeed())
	f.eventually(p, func(g Gomega) { g.Expect(failureDomainNames(p)).To(ConsistOf(proxmoxtest.Node1)) }, 30*time.Second)
	f.g.Expect(pve.SetNodeOnline(proxmoxtest.Node2, true)).To(Succeed())
	f.eventually(p, func(g Gomega) { g.Expect(failureDomainNames(p)).To(ConsistOf(proxmoxtest.Node1, proxmoxtest.Node2)) }, 30*time.Second)

	// The whole API goes away, and comes back.
	pve.Down()
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "BackendReachable")).To(HavePrefix("False/Unreachable: "))
	}, 30*time.Second)
	f.g.Expect(pve.Up()).To(Succeed())
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
}

func TestAFailedProxmoxCloneIsReportedThenRetried(t *testing.T) {
	f := newFixture(t)
	// A clone that takes a second, as real ones take longer, fails once.
	pve := startPVE(t, func(o *proxmoxsim.Options) { o.TaskDelays = map[string]time.Duration{"qmclone": time.Second} })
	pve.FailNextTask("qmclone", "storage 'local-lvm' is full")
	c := proxmoxConfig()
	// A retry after a few seconds, so the failure is there long enough to be seen.
	c.MachineOptions = append(c.MachineOptions, providersdk.WithUnreachableBackoff(3*time.Second, 5*time.Second))
	f.startProvider(c)
	f.proxmoxProvider(pve)
	vm := f.vm("web-1", f.class("small"), f.image("ubuntu", builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName)))
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "InfrastructureReady")).To(And(HavePrefix("False/TaskFailed: "), ContainSubstring("storage 'local-lvm' is full")))
	}, 30*time.Second)
	f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 60*time.Second)
	f.g.Expect(pve.VMs()).To(HaveLen(2), "the template and the one VM")
}

func TestTwentyVMsCreatedAtOnceGetTwentyVMIDs(t *testing.T) {
	f := newFixture(t)
	pve := startPVE(t)
	f.startProvider(proxmoxConfig())
	f.proxmoxProvider(pve)
	class := f.class("tiny", func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}
		c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
	})
	img := f.image("ubuntu", builder.Template(proxmox.ProviderClass, proxmoxtest.TemplateName))
	vms := make([]*banlieuev1.VirtualMachine, 20)
	for i := range vms {
		vms[i] = f.vm(fmt.Sprintf("vm-%02d", i), class, img)
	}
	ids := map[int]bool{}
	for _, vm := range vms {
		f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 120*time.Second)
		ids[f.vmid(vm.Name)] = true
	}
	f.g.Expect(ids).To(HaveLen(20), "distinct VMIDs")
	f.g.Expect(pve.VMs()).To(HaveLen(21), "the template and the 20 VMs")
}

// failureDomainNames lists a Provider's failure domains.
func failureDomainNames(p *banlieuev1.Provider) []string {
	names := make([]string, 0, len(p.Status.FailureDomains))
	for _, d := range p.Status.FailureDomains {
		names = append(names, d.Name)
	}
	return names
}

// machineUIDOf is the UID of the VM's infrastructure machine of kind.
func (f *fixture) machineUIDOf(kind, name string) string {
	f.t.Helper()
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(infrav1.GroupVersion.WithKind(kind))
	f.g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, m)).To(Succeed())
	return string(m.UID)
}

func TestAUrlImageIsImportedOnProxmoxAndAVMIsMadeFromIt(t *testing.T) {
	f := newFixture(t)
	pve := startPVE(t)
	// A disk image served on loopback, as an image mirror would serve it.
	image := bytes.Repeat([]byte("banlieue"), 4096)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(image) }))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(image)

	f.startProvider(proxmoxConfig())
	p := f.proxmoxProvider(pve)
	img := f.image("jammy", banlieuev1.ImageSource{
		ProviderClass: proxmox.ProviderClass, Kind: banlieuev1.ImageSourceURL,
		ImportFrom: srv.URL + "/jammy.qcow2", Checksum: "sha256:" + hex.EncodeToString(sum[:]),
	})
	f.eventually(img, func(g Gomega) {
		row := img.ProviderStatus(p.Namespace, p.Name)
		g.Expect(row).NotTo(BeNil())
		g.Expect(row.Ready).To(HaveValue(BeTrue()), "row %+v", row)
		g.Expect(row.ResolvedRef).To(HavePrefix(proxmoxtest.Node1 + "/"))
	}, 60*time.Second)

	vm := f.vm("web-1", f.class("small"), img)
	f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 60*time.Second)
}
