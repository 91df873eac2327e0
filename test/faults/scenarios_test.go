package faults

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox"
)

// truthTimeout bounds the wait for a condition to report a fault that is in force.
// The fault lasts until it has been reported, so this is a bound for a hang, not a
// timing assertion.
const truthTimeout = 3 * time.Minute

// roundsTime is about how long n kill rounds take.
func roundsTime(n int) time.Duration { return time.Duration(n) * (maxKillDelay + maxDowntime) / 2 }

// paced calls f(0) … f(n-1) spread over about d, in the background, and reports the
// first error (or nil) when done.
func paced(n int, d time.Duration, f func(i int) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		step := d / time.Duration(max(n, 1))
		for i := range n {
			if err := f(i); err != nil {
				done <- err
				return
			}
			time.Sleep(step)
		}
		done <- nil
	}()
	return done
}

func (r *rig) createUnderKills(t *testing.T) {
	n := r.size.Rounds / 2
	// Two namespaces race to adopt each of a few VMs made behind banlieue's back, while
	// the fleet is created and the processes killed (adopt_test.go).
	r.startAdoption(t)
	created := paced(r.size.VMs, roundsTime(n), func(i int) error { return r.c.Create(r.ctx, r.newVM(i)) })
	r.killRounds(t, n)
	if err := <-created; err != nil {
		t.Fatalf("failed to create a VM: %v", err)
	}
	r.requireRunning(t)
	start := time.Now()
	r.awaitAdoption(t)
	adopted := time.Since(start)
	took, inv := r.converge(t)
	r.record("create the fleet", fmt.Sprintf("%d VMs created during %d kill rounds; %d backend VMs each adopted by one of two namespaces meanwhile", r.size.VMs, n, len(r.adoptions)), adopted+took, inv)
}

func (r *rig) deleteUnderKills(t *testing.T) {
	g := NewWithT(t)
	n := r.size.Rounds - r.size.Rounds/2
	// One VM per simulator is let go (deletionPolicy Retain): its deletion, under the
	// same kills, must leave its backend VM as it was, unmarked.
	retained := r.retainOnePerSimulator(t)
	// So are the VMs adopted on the simulated vCenter (the Proxmox VE ones were let go
	// before the Provider's deletion): their VirtualMachines, winners and losers, are
	// deleted with the fleet.
	r.retainAdopted(t, vsphereProv)
	adopted := r.adoptionVMs(vsphereProv)
	vms := r.vms(g)
	keys := make([]client.ObjectKey, 0, len(vms)+len(adopted))
	for _, vm := range vms {
		keys = append(keys, client.ObjectKeyFromObject(&vm))
	}
	keys = append(keys, adopted...)
	deleted := paced(len(keys), roundsTime(n), func(i int) error {
		vm := &banlieuev1.VirtualMachine{}
		vm.Namespace, vm.Name = keys[i].Namespace, keys[i].Name
		return client.IgnoreNotFound(r.c.Delete(r.ctx, vm))
	})
	r.killRounds(t, n)
	if err := <-deleted; err != nil {
		t.Fatalf("failed to delete a VM: %v", err)
	}
	start := time.Now()
	g.Eventually(func(g Gomega) {
		left := r.vms(g)
		g.Expect(left).To(BeEmpty(), "%d VMs are left", len(left))
	}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(Succeed())
	r.awaitAdoptedGone(g, vsphereProv)
	took := time.Since(start)
	r.requireRunning(t)
	// Besides the VMs adopted and let go before (checkReleased adds them).
	ids := r.checkRetained(t, retained)
	maps.Copy(ids, r.retained)
	r.retained = ids
	r.checkReleased(t, vsphereProv)
	r.record("delete the fleet", fmt.Sprintf("%d VMs deleted during %d kill rounds, %d of them under deletionPolicy Retain (%d adopted); every backend then empty but for those, unmarked", len(keys), n, len(retained)+len(adopted)/2, len(adopted)/2),
		took, r.checkInventory(t, true))
}

// outage is a backend that can be stopped and started.
type outage struct {
	name, provider string
	down           func()
	up             func() error
	// canFlip says whether the outage may change a VM's power: libvirt's VMs are only
	// powered on, as the real guest of guestVM must live through the suite, and a blank
	// disk ignores ACPI, so powering one off would wait for the shutdown timeout.
	canFlip func(*banlieuev1.VirtualMachine) bool
}

func (r *rig) outages() []outage {
	b := r.backends
	always := func(*banlieuev1.VirtualMachine) bool { return true }
	out := []outage{
		// A vCenter that comes back has forgotten its sessions, as a restarted one has.
		{"vSphere", vsphereProv, b.VSphere.Down, func() error { return b.VSphere.Restart(r.ctx) }, always},
		{"Proxmox VE", proxmoxProv, b.Proxmox.Down, b.Proxmox.Up, always},
	}
	if b.Libvirt != nil {
		out = append(out, outage{"libvirt", libvirtProv, b.Libvirt.Kill, b.Libvirt.Restart, func(vm *banlieuev1.VirtualMachine) bool {
			return desired(vm) == banlieuev1.PowerStatePoweredOff
		}})
	}
	return out
}

// flipsPerFault is how many VMs change power while a fault is in force, so that their
// machines meet it.
const flipsPerFault = 3

// flipSome asks up to flipsPerFault VMs on a Provider for the other power state and
// returns their names and new states.
func (r *rig) flipSome(g Gomega, provider string, canFlip func(*banlieuev1.VirtualMachine) bool) map[string]banlieuev1.PowerState {
	flips := map[string]banlieuev1.PowerState{}
	for _, vm := range r.vmsOn(g, provider) {
		if len(flips) == flipsPerFault {
			break
		}
		if canFlip(&vm) {
			flips[vm.Name] = flipped(desired(&vm))
			r.setPower(g, vm.Name, flips[vm.Name])
		}
	}
	return flips
}

// watchTruth polls the Provider and the flipped VMs while a fault is in force, until
// the Provider reports it (providerSays), some flipped VM's machine reports it (reason)
// and at least minimum has passed. Meanwhile no flipped VM may claim the power state
// it asked for: nothing could have changed it.
func (r *rig) watchTruth(t *testing.T, provider string, flips map[string]banlieuev1.PowerState, minimum time.Duration, providerSays func(*banlieuev1.Provider) bool, reason string) {
	t.Helper()
	start := time.Now()
	var sawProvider, sawMachine bool
	lies := map[string]bool{}
	for {
		g := NewWithT(t)
		p := r.provider(g, provider)
		sawProvider = sawProvider || providerSays(p)
		for _, vm := range r.vms(g) {
			want, ok := flips[vm.Name]
			if !ok {
				continue
			}
			if vm.Status.ObservedPowerState == want && !lies[vm.Name] {
				lies[vm.Name] = true
				t.Errorf("%s reported %s while its backend could not have changed it", vm.Name, want)
			}
			if c := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.VirtualMachineInfrastructureReadyCondition); c != nil && c.Reason == reason {
				sawMachine = true
			}
		}
		if sawProvider && (sawMachine || len(flips) == 0) && time.Since(start) >= minimum {
			t.Logf("%s reported the fault: Ready %s; the changed VMs' machines: %s", provider, conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition), reason)
			return
		}
		if time.Since(start) > minimum+truthTimeout {
			t.Fatalf("%s: the conditions did not report the fault: Provider reported it: %t (Ready %s), a flipped VM's machine said %s: %t",
				provider, sawProvider, conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition), reason, sawMachine)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (r *rig) backendOutages(t *testing.T) {
	for _, o := range r.outages() {
		t.Run(o.name, func(t *testing.T) {
			g := NewWithT(t)
			start := time.Now()
			o.down()
			// The changed VMs' machines meet the outage and wake the Provider's check.
			flips := r.flipSome(g, o.provider, o.canFlip)
			r.watchTruth(t, o.provider, flips, r.size.Outage, func(p *banlieuev1.Provider) bool {
				return strings.HasPrefix(conditionOf(p.Status.Conditions, banlieuev1.ProviderBackendReachableCondition), "False/"+banlieuev1.ProviderBackendUnreachableReason)
			}, infrav1.MachineBackendUnreachableReason)
			down := time.Since(start)
			g.Expect(o.up()).To(Succeed())
			took, inv := r.converge(t)
			r.record("backend outage", fmt.Sprintf("%s stopped for %.0f s; VMs asked to change power meanwhile: %d", o.name, down.Seconds(), len(flips)), took, inv)
		})
	}
}

func (r *rig) apiServerRestart(t *testing.T) {
	g := NewWithT(t)
	g.Expect(r.env.KillAPIServer(filepath.Join(r.tmp, "apiserver-certs"))).To(Succeed())
	time.Sleep(r.size.APIServerDown)
	g.Expect(r.env.StartAPIServer()).To(Succeed())
	// Changes made after the restart reach the backends only if every process's
	// watches came back.
	r.flipSome(g, vsphereProv, func(*banlieuev1.VirtualMachine) bool { return true })
	r.flipSome(g, proxmoxProv, func(*banlieuev1.VirtualMachine) bool { return true })
	took, inv := r.converge(t)
	r.requireRunning(t)
	r.record("kube-apiserver restart", fmt.Sprintf("SIGKILL, down %.0f s, started again on the same etcd; VMs asked to change power after: %d", r.size.APIServerDown.Seconds(), 2*flipsPerFault), took, inv)
}

// updateSecret re-reads a credentials Secret of devenv.ProviderNamespace, replaces its
// data and writes it back.
func (r *rig) updateSecret(g Gomega, name string, data map[string][]byte) {
	g.Eventually(func() error {
		s := &corev1.Secret{}
		if err := r.c.Get(r.ctx, client.ObjectKey{Namespace: devenv.ProviderNamespace, Name: name}, s); err != nil {
			return err
		}
		s.Data, s.StringData = data, nil
		return r.c.Update(r.ctx, s)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

func (r *rig) credentialsRotation(t *testing.T) {
	t.Run("vSphere: a wrong password, then the right one", func(t *testing.T) {
		g := NewWithT(t)
		vs := r.backends.VSphere
		start := time.Now()
		r.updateSecret(g, vsphereProv, map[string][]byte{"username": []byte(vs.Username), "password": []byte("not-" + vs.Password)})
		rejected := func(p *banlieuev1.Provider) bool {
			return strings.HasPrefix(conditionOf(p.Status.Conditions, banlieuev1.ProviderCredentialsValidCondition), "False/"+banlieuev1.ProviderCredentialsRejectedReason)
		}
		// The open session outlives the Secret's change until the Provider's next
		// inventory refresh (once a minute) reads the Secret again and drops it (as a
		// vCenter session outlives a password change), so the VMs are changed once the
		// Provider has said the credentials are rejected.
		g.Eventually(func() bool { return rejected(r.provider(g, vsphereProv)) }).WithTimeout(2 * time.Minute).Should(BeTrue())
		flips := r.flipSome(g, vsphereProv, func(*banlieuev1.VirtualMachine) bool { return true })
		r.watchTruth(t, vsphereProv, flips, 0, rejected, infrav1.MachineCredentialsRejectedReason)
		wrong := time.Since(start)
		r.updateSecret(g, vsphereProv, map[string][]byte{"username": []byte(vs.Username), "password": []byte(vs.Password)})
		took, inv := r.converge(t)
		r.record("credentials rotation", fmt.Sprintf("vSphere Secret rotated to a wrong password for %.0f s, then back", wrong.Seconds()), took, inv)
	})
	t.Run("Proxmox VE: from an API token to a user's password", func(t *testing.T) {
		g := NewWithT(t)
		pve := r.backends.Proxmox
		pve.ResetRequests()
		r.updateSecret(g, proxmoxProv, map[string][]byte{proxmox.UsernameKey: []byte(pve.Username), proxmox.PasswordKey: []byte(pve.Password)})
		r.flipSome(g, proxmoxProv, func(*banlieuev1.VirtualMachine) bool { return true })
		took, inv := r.converge(t)
		// A password logs in for a ticket; the token never does. The token's session
		// serves until the Provider's next inventory refresh reads the Secret again.
		g.Eventually(pve.Requests).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(
			HaveKeyWithValue("POST /access/ticket", BeNumerically(">", 0)), "the provider never logged in with the new credentials")
		r.record("credentials rotation", "Proxmox VE Secret rotated from an API token to a user and password", took, inv)
	})
}

func (r *rig) providerDeletion(t *testing.T) {
	g := NewWithT(t)
	// The VMs adopted on Proxmox VE cannot move (migrationPolicy never) and would hold
	// the Provider: they are let go first, under deletionPolicy Retain.
	r.releaseAdopted(t, proxmoxProv)
	on := r.vmsOn(g, proxmoxProv)
	if len(on) < 2 {
		t.Fatalf("%d VMs on %s; the scenario needs two", len(on), proxmoxProv)
	}
	// One VM waits for approval before it moves, so the Provider is held long enough to
	// be seen held.
	held := on[0].Name
	r.updateVM(g, held, func(vm *banlieuev1.VirtualMachine) { vm.Spec.MigrationPolicy = banlieuev1.MigrationPolicyManual })
	p := r.provider(g, proxmoxProv)
	start := time.Now()
	g.Expect(r.c.Delete(r.ctx, p)).To(Succeed())

	// The others move to vSphere while the Provider stays, held by its finalizer, and
	// says why.
	g.Eventually(func(g Gomega) {
		left := r.vmsOn(g, proxmoxProv)
		g.Expect(left).To(HaveLen(1))
		g.Expect(left[0].Name).To(Equal(held), "a VM with migrationPolicy manual moved without approval")
		p := r.provider(g, proxmoxProv)
		g.Expect(p.DeletionTimestamp).NotTo(BeNil())
		g.Expect(controllerutil.ContainsFinalizer(p, providersdk.ProviderFinalizer)).To(BeTrue())
		g.Expect(conditionOf(p.Status.Conditions, banlieuev1.ReadyCondition)).To(And(
			HavePrefix("False/"+banlieuev1.ProviderDeletionBlockedReason+": "), ContainSubstring("1 ProxmoxMachine"), ContainSubstring(held)))
		g.Expect(unconverged(r.vmsOn(g, vsphereProv))).To(BeEmpty())
	}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(Succeed())

	// Approved, the last VM moves and the Provider goes.
	r.updateVM(g, held, func(vm *banlieuev1.VirtualMachine) {
		if vm.Annotations == nil {
			vm.Annotations = map[string]string{}
		}
		vm.Annotations[banlieuev1.MigrateAnnotation] = "true"
	})
	g.Eventually(func() bool {
		return apierrors.IsNotFound(r.c.Get(r.ctx, client.ObjectKeyFromObject(p), &banlieuev1.Provider{}))
	}).WithTimeout(r.size.Converge).WithPolling(time.Second).Should(BeTrue(), "the Provider is still there")
	gone := time.Since(start)
	took, inv := r.converge(t)
	g.Expect(r.vmsOn(g, proxmoxProv)).To(BeEmpty())
	r.record("Provider deletion", fmt.Sprintf("Proxmox Provider with %d VMs deleted; DeletionBlocked until they moved to vSphere (%.0f s)", len(on), gone.Seconds()), took, inv)

	// Bring the Provider back for the last scenario: a new Provider of the same name.
	objs := enableAdoption(devenv.ProxmoxObjects(r.backends.Proxmox))
	g.Expect(r.c.Create(r.ctx, objs[len(objs)-1])).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(conditionOf(r.provider(g, proxmoxProv).Status.Conditions, banlieuev1.ReadyCondition)).To(Equal("True/Ready: "))
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
