package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// TestAHandWrittenLibvirtMachineGetsOnlyWhatItsProviderOffers writes LibvirtMachines as
// a tenant with the right to would, each asking for more than its Provider offers, and
// checks with virsh, not through banlieue, that libvirtd made no domain for any of them.
func TestAHandWrittenLibvirtMachineGetsOnlyWhatItsProviderOffers(t *testing.T) {
	f := newFixture(t)
	d := startLibvirtd(t)
	// Another tenant's disk, which no VMImage names.
	if err := d.CreateBlankImage(lvPool, "tenant-b-db.qcow2", 1); err != nil {
		t.Fatal(err)
	}
	f.startProvider(libvirtConfig())
	p := f.libvirtProvider(d)
	f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
	img := f.image("jammy", builder.BackingFile(libvirt.ProviderClass, lvPool+"/"+lvImage))

	asCore := func() infrav1.MachineSpec {
		return infrav1.MachineSpec{
			ProviderRef: infrav1.ProviderRef{Namespace: p.Namespace, Name: p.Name},
			Image:       infrav1.MachineImage{Name: img.Name, Kind: banlieuev1.ImageSourceBackingFile, Ref: lvPool + "/" + lvImage},
			Hardware:    infrav1.MachineHardware{CPUs: 1, MemoryMiB: 256},
			Disks:       []infrav1.MachineDisk{{Name: "root", SizeGiB: 2, StorageClass: "fast", Target: p.StorageClass("fast").Target}},
			Interfaces:  []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod", Target: p.NetworkClass("prod").Target}},
			PowerState:  banlieuev1.PowerStatePoweredOff,
		}
	}
	tests := []struct {
		name    string
		attack  func(*infrav1.MachineSpec)
		block   *infrav1.LibvirtOptions
		message string
	}{
		{name: "its disk backed by another tenant's volume", attack: func(s *infrav1.MachineSpec) { s.Image.Ref = lvPool + "/tenant-b-db.qcow2" }, message: "spec.image is not VMImage"},
		{name: "its disk backed by a host path", attack: func(s *infrav1.MachineSpec) { s.Image.ResolvedRef = "/var/lib/libvirt/images/tenant-b-db.qcow2" }, message: "spec.image.resolvedRef"},
		{name: "its disk in a pool the Provider never offered", attack: func(s *infrav1.MachineSpec) { s.Disks[0].Target = map[string]string{libvirt.TargetPool: "default"} }, message: "spec.disks[0].target"},
		{name: "its interface on a network the Provider never offered", attack: func(s *infrav1.MachineSpec) {
			s.Interfaces[0].Target = map[string]string{libvirt.TargetNetwork: "default"}
		}, message: "spec.interfaces[0].target"},
		{name: "its spec.libvirt block picking a pool the Provider never offered", attack: func(*infrav1.MachineSpec) {},
			block: &infrav1.LibvirtOptions{StoragePool: "default"}, message: `spec.libvirt.storagePool "default"`},
	}
	for i, tt := range tests {
		spec := asCore()
		tt.attack(&spec)
		m := &infrav1.LibvirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fmt.Sprintf("attack-%d", i)}, Spec: infrav1.LibvirtMachineSpec{MachineSpec: spec, Libvirt: tt.block}}
		f.create(m)
		f.eventually(m, func(g Gomega) {
			g.Expect(conditionOf(m.Status.Conditions, "Ready")).To(And(HavePrefix("False/"+infrav1.MachineNotPermittedReason+": "), ContainSubstring(tt.message)), tt.name)
		}, 30*time.Second)
	}
	// A machine as core would write it is admitted: the refusals are not of everything.
	ok := &infrav1.LibvirtMachine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "as-core"}, Spec: infrav1.LibvirtMachineSpec{MachineSpec: asCore()}}
	f.create(ok)
	f.eventually(ok, func(g Gomega) { g.Expect(conditionOf(ok.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 90*time.Second)
	f.g.Expect(virshDomains(t, d)).To(ConsistOf(f.ns+".as-core"), "libvirtd has a domain of a refused machine")
}

// virshDomains lists the daemon's domains with virsh, the witness banlieue did not write;
// without virsh it fails in CI and falls back to the project's own client elsewhere.
func virshDomains(t *testing.T, d *libvirtd.Daemon) []string {
	t.Helper()
	virsh, err := exec.LookPath("virsh")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("virsh is not installed; make test installs it (hack/deps.sh)")
		}
		t.Log("virsh is not installed; listing the domains with go-libvirt")
		return domains(NewWithT(t), d)
	}
	out, err := exec.Command(virsh, "-c", d.QEMUURI(), "list", "--all", "--name").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}
