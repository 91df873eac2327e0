package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

// Names of the fleet's objects. The Providers are devenv's, in devenv.ProviderNamespace.
const (
	namespace   = "faults"
	className   = "faults-small"
	imageName   = "faults-image"
	userDataRef = "faults-user-data"
	vsphereProv = "vcenter-dc1"
	proxmoxProv = "pve-edge"
	libvirtProv = "kvm-dev"
)

// rig is the fleet under test: the control plane, the simulated backends, banlieue's
// processes and the random source of the kill rounds.
type rig struct {
	ctx      context.Context
	env      *testenv.Env
	c        client.Client
	size     size
	rng      *rand.Rand
	backends *backends
	// procs are the core controller, then one process per provider.
	procs  []*harness.Process
	logDir string
	// tmp outlives every scenario.
	tmp string
	// results are the rows of the report, one per scenario.
	results []result
	// guestBootID is the real guest's boot ID once it booted; "" without one.
	guestBootID string
	// retained are the backend VMs, as the inventory names them, that deletions under
	// deletionPolicy Retain let go: no machine stands for them, and none should.
	retained map[string]bool
	// adoptions are the backend VMs made behind banlieue's back that two
	// VirtualMachines each adopt (adopt_test.go).
	adoptions []*adoption
}

// result is one row of the report.
type result struct {
	scenario, fault string
	converge        time.Duration
	inv             inventoryCounts
}

func newRig(t *testing.T, sz size, seed uint64) *rig {
	t.Helper()
	testenv.Assets(t)
	ctx := context.Background()
	r := &rig{ctx: ctx, size: sz, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), tmp: t.TempDir()}

	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := env.InstallAdmission(); err != nil {
		t.Fatal(err)
	}
	r.env, r.c = env, env.Client

	b := startBackends(t)
	r.backends = b
	if b.Libvirt == nil {
		r.size.LibvirtVMs = 0
	}

	r.logDir, err = os.MkdirTemp("", "banlieue-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs are in %s", r.logDir)
			return
		}
		_ = os.RemoveAll(r.logDir)
	})
	bin, err := harness.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	commands := [][]string{{"controller"}, {"provider", vsphere.ProviderClass}, {"provider", proxmox.ProviderClass}}
	if b.Libvirt != nil {
		commands = append(commands, []string{"provider", libvirt.ProviderClass})
	}
	for _, args := range commands {
		name := strings.Join(args, "-")
		kubeconfig, err := env.Kubeconfig(r.logDir, name)
		if err != nil {
			t.Fatal(err)
		}
		if args[0] == "provider" {
			// Scans often, so that every scenario's Provider status comes from scans made
			// during it (converge checks that they found no orphan).
			args = append(args, "--orphan-scan-interval", "5s")
		}
		r.procs = append(r.procs, harness.StartForTest(t, 5*time.Second, bin, r.logDir, name, append(args, "--kubeconfig", kubeconfig)...))
	}

	for _, o := range append(enableAdoption(b.objects()), r.fleetObjects()...) {
		if err := r.c.Create(ctx, o); err != nil {
			t.Fatalf("failed to create %s %s: %v", o.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(o), err)
		}
	}
	g := NewWithT(t)
	for _, name := range r.providerNames() {
		g.Eventually(func(g Gomega) {
			p := r.provider(g, name)
			g.Expect(conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition)).To(Equal("True/Ready: "))
		}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "Provider %s", name)
	}
	return r
}

// providerNames are the Providers of the backends that run.
func (r *rig) providerNames() []string {
	names := []string{vsphereProv, proxmoxProv}
	if r.backends.Libvirt != nil {
		names = append(names, libvirtProv)
	}
	return names
}

// fleetObjects are the fleet's namespace, class and image. The class fits every
// backend's template and is small, since libvirt's VMs are real QEMU processes.
func (r *rig) fleetObjects() []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		devenv.Class(className, 1, 256),
		devenv.Image(imageName),
		builder.UserDataSecret(namespace, userDataRef, map[string][]byte{"user-data": []byte("#cloud-config\nhostname: faults\n")}),
	}
}

// newVM is the fleet's VM number i. The first LibvirtVMs go to libvirt, all powered
// off but the first, so that few QEMU processes run; the others may land on vSphere or
// Proxmox, so that a Proxmox Provider being deleted has somewhere to move them, and
// every fourth is powered off. Every third has user data, which each backend hands
// the guest its own way (Proxmox VE as an uploaded seed ISO the inventory counts).
func (r *rig) newVM(i int) *banlieuev1.VirtualMachine {
	vm := builder.VirtualMachine(namespace, fmt.Sprintf("vm-%03d", i), className, imageName)
	if i%3 == 1 {
		builder.WithUserData(userDataRef, "")(vm)
	}
	sel := &banlieuev1.LabelSelector{}
	if i < r.size.LibvirtVMs {
		sel.MatchLabels = map[string]string{"backend": libvirt.ProviderClass}
		if i > 0 {
			vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff
		}
	} else {
		sel.MatchExpressions = []banlieuev1.LabelSelectorRequirement{{Key: "backend", Operator: metav1.LabelSelectorOpIn, Values: []string{vsphere.ProviderClass, proxmox.ProviderClass}}}
		if i%4 == 3 {
			vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff
		}
	}
	vm.Spec.Placement.ProviderSelector = sel
	return vm
}

// provider reads a Provider of devenv.ProviderNamespace.
func (r *rig) provider(g Gomega, name string) *banlieuev1.Provider {
	p := &banlieuev1.Provider{}
	g.Expect(r.c.Get(r.ctx, client.ObjectKey{Namespace: devenv.ProviderNamespace, Name: name}, p)).To(Succeed())
	return p
}

// vms lists the fleet.
func (r *rig) vms(g Gomega) []banlieuev1.VirtualMachine {
	list := &banlieuev1.VirtualMachineList{}
	g.Expect(r.c.List(r.ctx, list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

// vmsOn lists the fleet's VMs placed on the Provider name, in name order.
func (r *rig) vmsOn(g Gomega, name string) []banlieuev1.VirtualMachine {
	var on []banlieuev1.VirtualMachine
	for _, vm := range r.vms(g) {
		if vm.Status.Scheduled.IsDefined() && vm.Status.Scheduled.ProviderName == name {
			on = append(on, vm)
		}
	}
	slices.SortFunc(on, func(a, b banlieuev1.VirtualMachine) int { return strings.Compare(a.Name, b.Name) })
	return on
}

// setPower sets a VM's desired power state, retrying on conflicts.
func (r *rig) setPower(g Gomega, name string, power banlieuev1.PowerState) {
	r.updateVM(g, name, func(vm *banlieuev1.VirtualMachine) { vm.Spec.DesiredPowerState = power })
}

// updateVM re-reads a VM, mutates it and writes it back, retrying on conflicts.
func (r *rig) updateVM(g Gomega, name string, mutate func(*banlieuev1.VirtualMachine)) {
	g.Eventually(func() error {
		vm := &banlieuev1.VirtualMachine{}
		if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: namespace, Name: name}, vm); err != nil {
			return err
		}
		mutate(vm)
		return r.c.Update(r.ctx, vm)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// desired is a VM's asked-for power state, PoweredOn when unset.
func desired(vm *banlieuev1.VirtualMachine) banlieuev1.PowerState {
	if vm.Spec.DesiredPowerState == "" {
		return banlieuev1.PowerStatePoweredOn
	}
	return vm.Spec.DesiredPowerState
}

// flipped is the other of PoweredOn and PoweredOff.
func flipped(p banlieuev1.PowerState) banlieuev1.PowerState {
	if p == banlieuev1.PowerStatePoweredOff {
		return banlieuev1.PowerStatePoweredOn
	}
	return banlieuev1.PowerStatePoweredOff
}

// unconverged lists what keeps the fleet from matching its spec: VMs not Ready, in
// another power state than asked, with status of an older generation, or deleting.
func unconverged(vms []banlieuev1.VirtualMachine) []string {
	var out []string
	for i := range vms {
		vm := &vms[i]
		switch {
		case !vm.DeletionTimestamp.IsZero():
			out = append(out, vm.Name+": still deleting")
		case !meta.IsStatusConditionTrue(vm.Status.Conditions, banlieuev1.ReadyCondition):
			out = append(out, vm.Name+": Ready is "+conditionOf(vm.Status.Conditions, banlieuev1.ReadyCondition))
		case vm.Status.ObservedPowerState != desired(vm):
			out = append(out, fmt.Sprintf("%s: %s, asked for %s", vm.Name, vm.Status.ObservedPowerState, desired(vm)))
		case vm.Status.ObservedGeneration != vm.Generation:
			out = append(out, fmt.Sprintf("%s: status of generation %d, spec at %d", vm.Name, vm.Status.ObservedGeneration, vm.Generation))
		}
	}
	slices.Sort(out)
	return out
}

// converge waits until every VM matches its spec and returns how long that took, then
// checks the backends for duplicates and orphans.
func (r *rig) converge(t *testing.T) (time.Duration, inventoryCounts) {
	t.Helper()
	start := time.Now()
	var left []string
	for deadline := start.Add(r.size.Converge); ; time.Sleep(time.Second) {
		g := NewWithT(t)
		if left = unconverged(r.vms(g)); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not converge in %s; %d VMs are off:\n%s", r.size.Converge, len(left), summary(left, 30))
		}
	}
	took := time.Since(start)
	inv := r.checkInventory(t, false)
	// The providers' own orphan reports agree with the inventory: none, ever (of the
	// Providers a scenario has not deleted).
	providers := &banlieuev1.ProviderList{}
	if err := r.c.List(r.ctx, providers, client.InNamespace(devenv.ProviderNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range providers.Items {
		if p.Status.Orphans.Count != 0 {
			t.Errorf("Provider %s reports %d orphaned VMs: %+v", p.Name, p.Status.Orphans.Count, p.Status.Orphans.VMs)
		}
	}
	return took, inv
}

// record adds a row to the report.
func (r *rig) record(scenario, fault string, took time.Duration, inv inventoryCounts) {
	r.results = append(r.results, result{scenario: scenario, fault: fault, converge: took, inv: inv})
}

// report prints the run's figures as the Markdown table docs/reliability.md holds.
func (r *rig) report(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | fault | time to converge | backend VMs checked | duplicates | orphans | machines without VM |\n|---|---|---|---|---|---|---|\n")
	for _, res := range r.results {
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %d | %d | %d | %d |\n", res.scenario, res.fault, res.converge.Seconds(), res.inv.vms, res.inv.duplicates, res.inv.orphans, res.inv.missing)
	}
	fmt.Fprintf(&b, "\n| process | restarts | CPU | peak RSS |\n|---|---|---|---|\n")
	for _, p := range r.procs {
		u, err := p.Usage()
		if err != nil {
			t.Log(err)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f s | %d MiB |\n", p.Name, p.Restarts(), u.CPU.Seconds(), u.PeakRSS>>20)
	}
	t.Log(b.String())
}

// conditionOf returns "Status/Reason: Message" of the condition t, or "".
func conditionOf(conditions []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conditions, t)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

// summary joins the first n lines and says how many more there are.
func summary(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… and %d more", len(lines)-n)
}
