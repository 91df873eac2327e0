package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/govc"
)

// simVM returns the simulator's one VM for the machine UID, failing if there is not
// exactly one.
func simVM(g Gomega, vs *vspheretest.Simulator, uid string) mo.VirtualMachine {
	vms, err := vs.VMsWithUID(context.Background(), uid)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vms).To(HaveLen(1), "VMs in vCenter carrying machine UID %s", uid)
	return vms[0]
}

// networkNames returns the names of the networks a VM is on.
func networkNames(g Gomega, vs *vspheretest.Simulator, vm mo.VirtualMachine) []string {
	var nets []mo.Network
	if len(vm.Network) > 0 {
		g.Expect(property.DefaultCollector(vs.Client.Client).Retrieve(context.Background(), vm.Network, []string{"name"}, &nets)).To(Succeed())
	}
	names := make([]string, 0, len(nets))
	for _, n := range nets {
		names = append(names, n.Name)
	}
	return names
}

// disksGiB lists a VM's disk sizes in GiB, in device order.
func disksGiB(vm mo.VirtualMachine) []int64 {
	var out []int64
	for _, d := range vm.Config.Hardware.Device {
		if disk, ok := d.(*types.VirtualDisk); ok {
			out = append(out, disk.CapacityInKB>>20)
		}
	}
	return out
}

func TestAVirtualMachineLivesItsWholeLifeOnVCenter(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	f.startProvider(vsphereConfig(nil))
	p := f.vsphereProvider(vs)
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: "))
		g.Expect(p.Status.MachineKind.IsDefined()).To(BeTrue())
		g.Expect(p.Status.FailureDomains).NotTo(BeEmpty())
	}, 30*time.Second)

	f.create(builder.UserDataSecret(f.ns, "cloud-init", map[string][]byte{"user-data": []byte("#cloud-config\nhostname: web-1\n")}))
	class := f.class("small")
	img := f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName))
	vm := f.vm("web-1", class, img, func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}}
		// The VM follows its class: the edits of the class below resize it.
		vm.Spec.ClassUpdatePolicy = banlieuev1.ClassUpdatePolicyFollow
	})

	// The VM runs on vCenter, shaped as its class says, with its user-data in guestinfo.
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		g.Expect(vm.Status.ProviderID).To(HavePrefix("vsphere://"))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning))
	}, 60*time.Second)
	uid := string(f.machine("web-1").UID)
	got := simVM(f.g, vs, uid)
	f.g.Expect(vm.Status.ProviderID).To(Equal("vsphere://" + got.Config.Uuid))
	f.g.Expect(got.Config.Hardware.NumCPU).To(BeEquivalentTo(2))
	f.g.Expect(got.Config.Hardware.MemoryMB).To(BeEquivalentTo(2048))
	f.g.Expect(disksGiB(got)).To(Equal([]int64{20, 5}))
	f.g.Expect(got.Runtime.PowerState).To(Equal(types.VirtualMachinePowerStatePoweredOn))
	f.g.Expect(networkNames(f.g, vs, got)).To(ConsistOf(vspheretest.Network, vspheretest.PortGroup), "networks the VM's NICs are on")
	userData, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(got, "guestinfo.userdata"))
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(string(userData)).To(Equal("#cloud-config\nhostname: web-1\n"))
	metadata, err := base64.StdEncoding.DecodeString(vspheretest.ExtraConfig(got, "guestinfo.metadata"))
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(string(metadata)).To(And(ContainSubstring("instance-id: "+uid), ContainSubstring("local-hostname: web-1")))

	// govc, a vSphere client banlieue did not write, finds the same VM in vCenter by the
	// providerID's BIOS UUID, named and shaped as the VM says and marked as the machine's.
	gv := govc.New(t, vs)
	biosUUID := strings.TrimPrefix(vm.Status.ProviderID, "vsphere://")
	seen, err := gv.VMByUUID(biosUUID)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(seen.Name).To(Equal(f.ns + ".web-1"))
	f.g.Expect(seen.Config.InstanceUUID).To(Equal(uid))
	f.g.Expect(seen.ExtraConfig(vsphere.ExtraConfigMachineUID)).To(Equal(uid))
	f.g.Expect(seen.Config.Hardware.NumCPU).To(BeEquivalentTo(2))
	f.g.Expect(seen.Config.Hardware.MemoryMB).To(BeEquivalentTo(2048))
	f.g.Expect(seen.DisksGiB()).To(Equal([]int64{20, 5}))
	f.g.Expect(seen.Runtime.PowerState).To(Equal(string(types.VirtualMachinePowerStatePoweredOn)))
	userData, err = base64.StdEncoding.DecodeString(seen.ExtraConfig("guestinfo.userdata"))
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(string(userData)).To(Equal("#cloud-config\nhostname: web-1\n"), "the user-data govc reads")

	// The guest reports an address; it reaches the VM's status.
	f.g.Expect(vs.SetGuestIP(f.ctx, got.Self.Value, "192.0.2.21")).To(Succeed())
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.Addresses).To(ContainElement(banlieuev1.MachineAddress{Type: banlieuev1.MachineInternalIP, Address: "192.0.2.21"}))
	}, 30*time.Second)

	// Power off, resize while off, power on.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff))
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseStopped))
	}, 30*time.Second)
	f.g.Expect(simVM(f.g, vs, uid).Runtime.PowerState).To(Equal(types.VirtualMachinePowerStatePoweredOff))
	seen, err = gv.VMByUUID(biosUUID)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(seen.Runtime.PowerState).To(Equal(string(types.VirtualMachinePowerStatePoweredOff)), "the power state govc reads")
	f.update(class, func() { class.Spec.Hardware.CPUs, class.Spec.Hardware.MemoryMiB = 4, 4096 })
	f.g.Eventually(func(g Gomega) {
		got := simVM(g, vs, uid)
		g.Expect(got.Config.Hardware.NumCPU).To(BeEquivalentTo(4))
		g.Expect(got.Config.Hardware.MemoryMB).To(BeEquivalentTo(4096))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn })
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, 30*time.Second)

	// Running, a CPU change that vSphere cannot make live waits for the VM's next
	// restart: the VM stays Ready and says so, and the restart makes it.
	f.update(class, func() { class.Spec.Hardware.CPUs = 8 })
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(HavePrefix("True/HardwareChangePending: the VM's next restart applies CPUs from 4 to 8;"))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, 30*time.Second)
	f.g.Expect(simVM(f.g, vs, uid).Config.Hardware.NumCPU).To(BeEquivalentTo(4), "the running VM was reconfigured")
	f.update(vm, func() { vm.Spec.RestartRequestedAt = &metav1.Time{Time: time.Now()} })
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted))
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("False/NoPendingChange: "))
	}, 60*time.Second)
	f.g.Expect(simVM(f.g, vs, uid).Config.Hardware.NumCPU).To(BeEquivalentTo(8), "the restart did not apply the pending CPUs")

	// Deleting the VM leaves nothing on vCenter.
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), vm))
	}).WithTimeout(60 * time.Second).Should(BeTrue())
	vms, err := vs.VMsWithUID(f.ctx, uid)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(vms).To(BeEmpty(), "VMs left on vCenter after deletion")
	f.g.Expect(gv.VMsNamed(f.ns+".web-1")).To(BeEmpty(), "VMs govc finds by the VM's name after deletion")
	_, err = gv.VMByUUID(biosUUID)
	f.g.Expect(err).To(MatchError(ContainSubstring("no such VM")), "govc's search by the providerID's UUID after deletion")
}

func TestAMissingTemplateKeepsTheVMUnscheduledAndSaysWhy(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	f.startProvider(vsphereConfig(nil))
	p := f.vsphereProvider(vs)
	img := f.image("gone", builder.Template(vsphere.ProviderClass, "no-such-template"))
	f.eventually(img, func(g Gomega) {
		row := img.ProviderStatus(p.Namespace, p.Name)
		g.Expect(row).NotTo(BeNil())
		g.Expect(row.Ready).To(HaveValue(BeFalse()))
		g.Expect(row.Reason).To(Equal(banlieuev1.ImageTemplateNotFoundReason))
	}, 30*time.Second)
	vm := f.vm("web-1", f.class("small"), img)
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Scheduled")).To(And(
			HavePrefix("False/NoCandidate: "),
			ContainSubstring(p.Namespace+"/"+p.Name+": image "+img.Name+" is not ready here"),
			ContainSubstring(`"no-such-template"`),
		))
	}, 30*time.Second)
}

func TestAWrongPasswordIsReportedThenFixed(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	f.startProvider(vsphereConfig(nil))
	p := f.vsphereProvider(vs, func(_ *banlieuev1.Provider, s *corev1.Secret) { s.Data["password"] = []byte("wrong") })
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "CredentialsValid")).To(HavePrefix("False/CredentialsRejected: "))
		g.Expect(conditionOf(p.Status.Conditions, "BackendReachable")).To(HavePrefix("True/"))
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(HavePrefix("False/CredentialsRejected: "))
	}, 30*time.Second)
	for _, c := range p.Status.Conditions {
		f.g.Expect(c.Message).NotTo(ContainSubstring("wrong"), "a condition shows the password")
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "vcenter"}}
	f.update(secret, func() { secret.Data["password"] = []byte(vs.Password) })
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: "))
		g.Expect(conditionOf(p.Status.Conditions, "CredentialsValid")).To(Equal("True/Valid: "))
	}, 30*time.Second)
}

func TestAVCenterThatGoesAwayIsReportedAndRecovers(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	f.startProvider(vsphereConfig(nil))
	p := f.vsphereProvider(vs)
	vm := f.vm("web-1", f.class("small"), f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName)))
	f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 60*time.Second)

	vs.Stop()
	f.eventually(p, func(g Gomega) {
		g.Expect(conditionOf(p.Status.Conditions, "BackendReachable")).To(HavePrefix("False/Unreachable: "))
		g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(HavePrefix("False/Unreachable: "))
	}, 30*time.Second)
	// An outage never moves or deletes a VM.
	f.g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
		g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue())
		g.Expect(vm.Status.Scheduled.ProviderName).To(Equal(p.Name))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	f.g.Expect(vs.Restart(f.ctx)).To(Succeed())
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
	// The machines work again: a power change goes through on the new session.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff)) }, 30*time.Second)
}

// errKilled is what a provider process "killed" right after starting a clone returns.
var errKilled = errors.New("provider process killed")

func TestAProviderKilledMidCloneAdoptsItsVMOnRestart(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	vspheretest.DelayTask(t, vspheretest.TaskClone, 2*time.Second)

	// The first provider process starts the clone and dies before writing anything.
	var (
		mu      sync.Mutex
		started bool
	)
	driver := vsphere.NewDriver()
	killed := make(chan struct{})
	dying := providersdk.DriverFunc(func(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		cl, err := driver.Connect(ctx, info)
		if err != nil {
			return nil, err
		}
		return struct {
			providersdk.ClientFns
			providersdk.InventoryReader
			providersdk.ImageResolver
		}{providersdk.ClientFns{
			ObserveFn: cl.Observe, DisconnectFn: cl.Disconnect,
			CreateFn: func(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
				mu.Lock()
				defer mu.Unlock()
				if !started {
					started = true
					if _, err := cl.Create(ctx, m, obs); err != nil {
						return providersdk.CreateResult{}, err
					}
					close(killed)
				}
				return providersdk.CreateResult{}, errKilled
			},
		}, cl.(providersdk.InventoryReader), cl.(providersdk.ImageResolver)}, nil
	})
	stopFirst := f.startProvider(vsphereConfig(dying))
	f.vsphereProvider(vs)
	vm := f.vm("web-1", f.class("small"), f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName)))
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("the first provider never started a clone")
	}
	stopFirst()
	f.g.Expect(f.machine("web-1").Status.Task.IsDefined()).To(BeFalse(), "the killed process recorded its task")

	// Its successor finds the clone (or the VM it made) and adopts it.
	f.startProvider(vsphereConfig(nil))
	f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 60*time.Second)
	uid := string(f.machine("web-1").UID)
	f.g.Consistently(func(g Gomega) { simVM(g, vs, uid) }).WithTimeout(3 * time.Second).Should(Succeed())
	all, err := vs.VMs(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	var ours []string
	for _, v := range all {
		if strings.HasPrefix(v.Name, f.ns+".") {
			ours = append(ours, v.Name)
		}
	}
	f.g.Expect(ours).To(HaveLen(1), "VMs of this test's namespace on vCenter")
}

func TestFiftyVMsShareOneVCenterSession(t *testing.T) {
	f := newFixture(t)
	vs := vspheretest.Start(t)
	f.startProvider(vsphereConfig(nil))
	f.vsphereProvider(vs)
	class := f.class("tiny", func(c *banlieuev1.VMClass) {
		c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 1, 512
		c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}
		c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
	})
	img := f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName))
	vms := make([]*banlieuev1.VirtualMachine, 50)
	for i := range vms {
		vms[i] = f.vm("vm-"+string(rune('a'+i/26))+string(rune('a'+i%26)), class, img)
	}
	for _, vm := range vms {
		f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 120*time.Second)
	}
	n, err := vs.Sessions(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(n).To(Equal(1), "vCenter sessions of the provider for one Provider and 50 VMs")
}
