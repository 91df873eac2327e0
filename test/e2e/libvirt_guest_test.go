package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/test/guestagent"
	"github.com/banlieue/banlieue/test/testenv"
)

// guestBootTimeout bounds a real guest's boot to a running agent; under TCG on two
// busy cores a Debian guest takes about a minute.
const guestBootTimeout = 5 * time.Minute

// TestARealGuestSeesWhatBanlieuePromised boots the Debian guest hack/guest-image.sh
// builds, through a VirtualMachine, core and the libvirt provider, and checks from inside
// the guest, through its own agent (virsh qemu-agent-command) and libvirt's DHCP leases
// (virsh net-dhcp-leases), what banlieue promised: the user data applied, the static
// address of the class on the first NIC and the DHCP address on the second, both in the
// VM's status; a power off that is the guest's own clean shutdown; a suspend that keeps
// the guest's boot and uptime; an offline resize the guest sees; CPUs, memory and a disk
// grown while it runs, which it sees in the same boot; a CPU beyond the maximum that
// waits for a restart that is one clean power cycle; and nothing left on the host after
// deletion.
func TestARealGuestSeesWhatBanlieuePromised(t *testing.T) {
	image := guestagent.Image(t)
	accel, why := guestagent.Accel()
	start := time.Now()
	f := newFixture(t)
	d := startLibvirtd(t)
	staticNet, err := d.DefineTestNetwork("static", "bnls") // the host's address: .1
	if err != nil {
		t.Fatal(err)
	}
	hostAddr := netip.MustParsePrefix(staticNet)
	staticAddr := netip.PrefixFrom(hostAddr.Addr().Next().Next().Next(), hostAddr.Bits()) // .4
	// A real guest takes longer than an empty domain to power off through ACPI: the
	// timeout must never be what powers it off. It is longer than the restart below may
	// take, so a restart held until the timeout fails.
	c := libvirt.Config(libvirt.WithShutdownTimeout(guestBootTimeout + time.Minute))
	c.InventoryInterval, c.ImageResync, c.MachineOptions = 2*time.Second, 2*time.Second, append(c.MachineOptions, testenv.FastMachineOptions()...)
	f.startProvider(c)
	// CPUs and memory may grow while the guest runs, up to 3 CPUs and 2 GiB: the class
	// below grows within them online and beyond them at the next restart.
	params := map[string]string{libvirt.ParamPool: lvPool, providersdk.ParamHotplug: "cpu,memory",
		providersdk.ParamMaxCPUs: "3", providersdk.ParamMaxMemoryMiB: "2048"}
	if accel != "" {
		params[libvirt.ParamDomainType] = accel
	}
	p := f.provider(builder.Provider(f.ns, "kvm", libvirt.ProviderClass,
		builder.WithConnection(banlieuev1.Connection{Endpoint: d.QEMUURI()}),
		builder.WithTestClasses(libvirt.TargetPool, lvPool, libvirt.TargetNetwork, "static", lvNetwork),
		builder.WithParameters(params),
	), nil)
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)

	token := "token-" + f.ns
	f.create(builder.UserDataSecret(f.ns, "cloud-init", map[string][]byte{"user-data": fmt.Appendf(nil,
		"#cloud-config\nhostname: witnessed-%s\nwrite_files:\n  - path: /var/lib/banlieue/token\n    content: %s\n", f.ns, token)}))
	const vol = "debian-guest.qcow2"
	if err := d.AddImage(lvPool, vol, image); err != nil {
		t.Fatal(err)
	}
	img := f.image("debian", builder.BackingFile(libvirt.ProviderClass, lvPool+"/"+vol))
	class := f.class("guest", builder.WithHardware(1, 1024),
		builder.WithDisks(banlieuev1.Disk{Name: "root", SizeGiB: 4, StorageClass: "fast"}),
		builder.WithInterfaces(
			banlieuev1.Interface{Name: "eth0", NetworkClass: "prod", IPAM: &banlieuev1.IPAM{
				Source: banlieuev1.IPAMSourceStatic, Static: banlieuev1.StaticIPAM{Addresses: []string{staticAddr.String()}}}},
			banlieuev1.Interface{Name: "eth1", NetworkClass: "backend"},
		))
	vm := f.vm("guest-1", class, img, func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "cloud-init"}}
		// The VM follows its class: the edits of the class below resize it.
		vm.Spec.ClassUpdatePolicy = banlieuev1.ClassUpdatePolicyFollow
	})
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.ProviderID).NotTo(BeEmpty(), "the VM has no domain; its conditions: %v", vm.Status.Conditions)
	}, 2*time.Minute)
	domain := f.ns + ".guest-1"
	ga := guestagent.New(t, d, domain)
	ga.WaitUp(guestBootTimeout)
	// Which hypervisor runs it: the one the test forced, or the provider's choice.
	accel = guestagent.DomainType(t, d, domain)
	t.Logf("acceleration: domainType %s (%s); guest agent up %s after the VM was created", accel, why, time.Since(start).Round(time.Second))

	// User data: cloud-init set the host name and wrote the token (its final stage ran).
	f.g.Eventually(func() string { return ga.Hostname() }).WithTimeout(3*time.Minute).WithPolling(2*time.Second).
		Should(Equal("witnessed-"+f.ns), "cloud-init did not set the host name of the user data")
	f.g.Eventually(func() error { _, err := ga.TryReadFile("/var/lib/banlieue/token"); return err }).
		WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	f.g.Expect(strings.TrimSpace(ga.ReadFile("/var/lib/banlieue/token"))).To(Equal(token))

	// Addresses: the class's static address on the NIC the seed names; DHCP on the
	// other, the network's lease; the VM's status lists both.
	var guestAddrs map[string][]string
	var dhcpMAC, dhcpAddr string
	f.g.Eventually(func(g Gomega) {
		guestAddrs = ga.Addresses()
		leases := guestagent.Leases(t, d, lvNetwork)
		g.Expect(leases).To(HaveLen(1), "the DHCP NIC has no lease yet")
		for mac, addr := range leases {
			dhcpMAC, dhcpAddr = mac, addr
		}
		g.Expect(guestAddrs[dhcpMAC]).To(ConsistOf(dhcpAddr), "the guest's DHCP address is not the network's lease")
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	f.g.Expect(guestAddrs).To(ContainElement(ConsistOf(staticAddr.Addr().String())), "the guest does not have the static address of its class")
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
		got := make([]string, 0, len(vm.Status.Addresses))
		for _, a := range vm.Status.Addresses {
			got = append(got, a.Address)
		}
		g.Expect(got).To(ContainElements(staticAddr.Addr().String(), dhcpAddr))
	}, 2*time.Minute)
	t.Logf("guest Ready with %v, %s after the VM was created", guestAddrs, time.Since(start).Round(time.Second))

	// The guest finishes starting up before its power is touched. The agent and the user
	// data come early in a boot, systemd-logind later: a power button pressed before
	// logind watches it is lost, and the shutdown timeout then pulls the plug. It has
	// started up with no unit failed, and cloud-init ran every stage without an error.
	var state string
	f.g.Eventually(func() string {
		state = strings.TrimSpace(ga.Exec("/bin/sh", "-c", "systemctl is-system-running || true"))
		return state
	}).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(BeElementOf("running", "degraded"), "the guest did not finish starting up")
	f.g.Expect(state).To(Equal("running"), func() string { // read from the guest only on a failure
		return "units failed in the guest:\n" + ga.Exec("/bin/sh", "-c", "systemctl --failed --no-legend || true") +
			"\nits journal's warnings and cloud-init's log:\n" +
			ga.Exec("/bin/sh", "-c", "journalctl -b -p warning --no-pager | tail -n 60; grep -iE 'warn|error|fail' /var/log/cloud-init.log | tail -n 40")
	})
	var result struct {
		V1 struct {
			Errors []string `json:"errors"`
		} `json:"v1"`
	}
	f.g.Expect(json.Unmarshal([]byte(ga.ReadFile("/run/cloud-init/result.json")), &result)).To(Succeed())
	f.g.Expect(result.V1.Errors).To(BeEmpty(), "cloud-init's errors in the guest")

	// Suspended and back: the same boot, and its uptime went on.
	bootID := ga.BootID()
	uptime := guestUptime(t, ga)
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStateSuspended })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStateSuspended)) }, 3*time.Minute)
	f.g.Expect(guestagent.DomainState(t, d, domain)).To(HavePrefix("shut off"), "a suspended domain is saved, not running")
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn)) }, 3*time.Minute)
	ga.WaitUp(time.Minute)
	f.g.Expect(ga.BootID()).To(Equal(bootID), "resuming rebooted the guest")
	f.g.Expect(guestUptime(t, ga)).To(BeNumerically(">=", uptime), "the guest's uptime went back")

	// PoweredOff: the guest shuts itself down (ACPI's power button, systemd-logind);
	// while it is off, the class grows to 2 CPUs and 1.5 GiB.
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOff)) }, 4*time.Minute)
	f.g.Expect(guestagent.DomainState(t, d, domain)).To(Equal("shut off (shutdown)"), "the domain was not shut down by its guest")
	f.update(class, func() { class.Spec.Hardware.CPUs, class.Spec.Hardware.MemoryMiB = 2, 1536 })
	f.g.Eventually(func() string { return guestagent.DomInfo(t, d, domain) }).WithTimeout(time.Minute).WithPolling(time.Second).
		Should(And(MatchRegexp(`CPU\(s\):\s+2\n`), MatchRegexp(`Max memory:\s+1572864 KiB`)), "the domain was not resized while off")
	// Its headroom stays the Provider's maxima: 3 CPUs and 2 GiB.
	f.g.Expect(guestagent.Virsh(t, d, "dumpxml", "--inactive", domain)).To(And(
		ContainSubstring(`<vcpu placement='static' current='2'>3</vcpu>`),
		ContainSubstring(`<maxMemory slots='16' unit='KiB'>2097152</maxMemory>`)), "the domain lost its headroom")
	f.update(vm, func() { vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOn })
	f.eventually(vm, func(g Gomega) { g.Expect(vm.Status.ObservedPowerState).To(Equal(banlieuev1.PowerStatePoweredOn)) }, time.Minute)
	ga.WaitUp(guestBootTimeout)
	f.g.Expect(ga.BootID()).NotTo(Equal(bootID), "the guest did not boot again")
	// The previous boot's journal: logind saw ACPI's power button and powered the
	// system off, which systemd finished (a forced destroy would end it anywhere).
	logind := ga.Exec("/usr/bin/journalctl", "-b", "-1", "-o", "cat", "--no-pager", "-t", "systemd-logind")
	for _, want := range []string{"Power key pressed", "System is powering down"} {
		if !strings.Contains(logind, want) {
			t.Errorf("systemd-logind of the guest's previous boot did not say %q; it said:\n%s", want, logind)
		}
	}
	last := ga.Exec("/usr/bin/journalctl", "-b", "-1", "-o", "cat", "--no-pager")
	for _, want := range []string{"System Power Off", "Journal stopped"} {
		if !strings.Contains(last, want) {
			lines := strings.Split(strings.TrimSpace(last), "\n")
			t.Errorf("the guest's previous boot has no %q in its journal; it ends:\n%s", want, strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
	}
	f.g.Expect(strings.TrimSpace(ga.Exec("/usr/bin/nproc"))).To(Equal("2"))
	f.g.Expect(guestMemTotalMiB(t, ga)).To(BeNumerically("~", 1536, 160), "MemTotal is the class's memory less the kernel's reserve")
	bootID2 := ga.BootID()

	// The class grows to 3 CPUs, 2 GiB and a 5 GiB root disk while the guest runs: all
	// within the domain's maxima (the Provider's hotplug), so all of it is made at once,
	// a CPU and a DIMM plugged in and the disk grown through QEMU; the guest sees them in
	// the same boot (its udev rule brings the CPU and the memory online) and nothing
	// waits for a restart.
	f.update(class, func() {
		class.Spec.Hardware.CPUs, class.Spec.Hardware.MemoryMiB, class.Spec.Hardware.Disks[0].SizeGiB = 3, 2048, 5
	})
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.Hardware).NotTo(BeNil())
		g.Expect([]int64{int64(vm.Status.Hardware.CPUs), vm.Status.Hardware.MemoryMiB}).To(Equal([]int64{3, 2048}))
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("False/NoPendingChange: "))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, 2*time.Minute)
	f.g.Expect(guestagent.DomInfo(t, d, domain)).To(And(MatchRegexp(`CPU\(s\):\s+3\n`), MatchRegexp(`Max memory:\s+2097152 KiB`)),
		"the running domain was not grown")
	f.g.Eventually(func() string { return strings.TrimSpace(ga.ReadFile("/sys/block/vda/size")) }).WithTimeout(time.Minute).WithPolling(time.Second).
		Should(Equal(strconv.Itoa(5<<30/512)), "the running guest does not see its 5 GiB disk")
	f.g.Eventually(func() string { return strings.TrimSpace(ga.Exec("/usr/bin/nproc")) }).WithTimeout(time.Minute).WithPolling(2*time.Second).
		Should(Equal("3"), "the running guest does not run its third CPU")
	f.g.Eventually(func() int { return guestMemTotalMiB(t, ga) }).WithTimeout(time.Minute).WithPolling(2*time.Second).
		Should(BeNumerically("~", 2048, 160), "the running guest does not use its plugged memory")
	f.g.Expect(ga.BootID()).To(Equal(bootID2), "the growth rebooted the guest")

	// A fourth CPU is beyond the domain's maximum: it waits for the next restart, and
	// the VM stays Ready and says so; the running guest keeps its 3.
	f.update(class, func() { class.Spec.Hardware.CPUs = 4 })
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("True/HardwareChangePending: the VM's next restart applies " +
			"CPUs from 3 to 4; set spec.restartRequestedAt, or power the VM off and on again"))
		g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/"))
	}, time.Minute)
	f.g.Expect(guestagent.DomInfo(t, d, domain)).To(MatchRegexp(`CPU\(s\):\s+3\n`), "the running domain's CPUs were changed")
	f.g.Expect(strings.TrimSpace(ga.Exec("/usr/bin/nproc"))).To(Equal("3"))
	f.g.Expect(ga.BootID()).To(Equal(bootID2), "the pending change rebooted the guest")

	// A restart (spec.restartRequestedAt) is one power cycle: the guest shuts down on its
	// own, libvirt starts it again with the pending CPU (its maximum raised to 4), and it
	// runs another boot.
	bootID = ga.BootID()
	f.update(vm, func() { vm.Spec.RestartRequestedAt = &metav1.Time{Time: time.Now()} })
	f.eventually(vm, func(g Gomega) {
		g.Expect(vm.Status.Restart.Result).To(Equal(banlieuev1.RestartResultRestarted), "the restart has not ended: %+v", vm.Status.Restart)
	}, guestBootTimeout)
	ga.WaitUp(guestBootTimeout)
	f.g.Expect(ga.BootID()).NotTo(Equal(bootID), "the restart did not boot the guest again")
	logind = ga.Exec("/usr/bin/journalctl", "-b", "-1", "-o", "cat", "--no-pager", "-t", "systemd-logind")
	f.g.Expect(logind).To(ContainSubstring("Power key pressed"), "the restart was not the guest's own shutdown")
	f.g.Expect(strings.TrimSpace(ga.Exec("/usr/bin/nproc"))).To(Equal("4"), "the restart did not apply the pending CPU")
	f.g.Expect(guestMemTotalMiB(t, ga)).To(BeNumerically("~", 2048, 160), "the restart lost the memory plugged in before")
	f.eventually(vm, func(g Gomega) {
		g.Expect(conditionOf(vm.Status.Conditions, "RestartRequired")).To(Equal("False/NoPendingChange: "))
	}, time.Minute)

	// Deleting the VM leaves no domain, overlay or seed; the image is the cache's, untouched.
	uid := f.machineUIDOf("LibvirtMachine", vm.Name)
	f.g.Expect(guestagent.Volumes(t, d, lvPool)).To(ContainElements(uid+"-root.qcow2", uid+"-cidata.iso"))
	f.g.Expect(k8s.Delete(f.ctx, vm)).To(Succeed())
	f.g.Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(f.ctx, client.ObjectKeyFromObject(vm), vm)) }).
		WithTimeout(3 * time.Minute).Should(BeTrue())
	f.g.Expect(virshDomains(t, d)).To(BeEmpty())
	f.g.Expect(guestagent.Volumes(t, d, lvPool)).To(ConsistOf(lvImage, vol))
	t.Logf("whole life of the real guest under %s: %s", accel, time.Since(start).Round(time.Second))
}

// guestUptime is the guest's /proc/uptime, in seconds.
func guestUptime(t *testing.T, ga *guestagent.Agent) float64 {
	t.Helper()
	f := strings.Fields(ga.ReadFile("/proc/uptime"))
	if len(f) == 0 {
		t.Fatal("empty /proc/uptime")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// memTotal is /proc/meminfo's MemTotal line.
var memTotal = regexp.MustCompile(`MemTotal:\s+(\d+) kB`)

// guestMemTotalMiB is the guest's MemTotal in MiB.
func guestMemTotalMiB(t *testing.T, ga *guestagent.Agent) int {
	t.Helper()
	m := memTotal.FindStringSubmatch(ga.ReadFile("/proc/meminfo"))
	if m == nil {
		t.Fatal("no MemTotal in /proc/meminfo")
	}
	kb, _ := strconv.Atoi(m[1])
	return kb / 1024
}
