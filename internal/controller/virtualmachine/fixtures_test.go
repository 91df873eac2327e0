package virtualmachine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

var fixtureSeq atomic.Int64

// fixture is one test's corner of the shared API server: its own namespace, and a
// label on its Providers that only its VMs select.
type fixture struct {
	t   *testing.T
	g   *WithT
	ctx context.Context
	ns  string
}

func newFixture(t *testing.T, nsLabels ...string) *fixture {
	t.Helper()
	// A test's name, sentences of subtests included, made a namespace name.
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	f := &fixture{t: t, g: NewWithT(t), ctx: context.Background(), ns: fmt.Sprintf("t%d-%s", fixtureSeq.Add(1), name)}
	f.ns = strings.TrimRight(f.ns[:min(len(f.ns), 63)], "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns, Labels: map[string]string{}}}
	for i := 0; i+1 < len(nsLabels); i += 2 {
		ns.Labels[nsLabels[i]] = nsLabels[i+1]
	}
	f.create(ns)
	return f
}

func (f *fixture) create(o client.Object) {
	f.t.Helper()
	f.g.Expect(k8s.Create(f.ctx, o)).To(Succeed())
}

// name makes a cluster-scoped name unique to this test.
func (f *fixture) name(n string) string { return f.ns + "-" + n }

// class creates a VMClass of 2 CPUs and 4096 MiB with the builder's root disk and
// interface, changed by mods.
func (f *fixture) class(name string, mods ...func(*banlieuev1.VMClass)) *banlieuev1.VMClass {
	c := builder.VMClass(f.name(name), append([]func(*banlieuev1.VMClass){builder.WithHardware(2, 4096)}, mods...)...)
	f.create(c)
	return c
}

// image creates a Linux (Ubuntu 22.04) VMImage from the test provider class's template.
func (f *fixture) image(name string) *banlieuev1.VMImage {
	i := builder.VMImage(f.name(name), builder.Template(provider.ProviderClass, "ubuntu-tpl"))
	i.Spec.OSFamily, i.Spec.OSDistribution, i.Spec.OSVersion = "linux", "ubuntu", "22.04"
	f.create(i)
	return i
}

// provider creates a Ready Provider of the test class in the fixture's namespace, with
// its status written as its provider controller would.
func (f *fixture) provider(name string, domains []banlieuev1.FailureDomain, mods ...func(*banlieuev1.Provider)) *banlieuev1.Provider {
	f.t.Helper()
	return f.providerIn(f.ns, name, domains, mods...)
}

// providerIn is provider in namespace ns, which must exist.
func (f *fixture) providerIn(ns, name string, domains []banlieuev1.FailureDomain, mods ...func(*banlieuev1.Provider)) *banlieuev1.Provider {
	f.t.Helper()
	p := builder.Provider(ns, name, provider.ProviderClass, append([]func(*banlieuev1.Provider){
		builder.WithLabels(map[string]string{"suite": f.ns, "name": name}),
		builder.WithConnection(banlieuev1.Connection{Endpoint: "test://" + name}),
		builder.WithStorageClass("fast", map[string]string{"datastore": "ds-" + name}),
		builder.WithNetworkClass("prod", map[string]string{"portgroup": "pg-" + name}),
		// Claimed by the test class's controller; a mod that clears machineKind stands
		// for a Provider no controller has claimed.
		func(p *banlieuev1.Provider) { p.Status.MachineKind = provider.MachineKind },
	}, mods...)...)
	status := p.Status
	f.create(p)
	p.Status = status
	if p.Status.Conditions == nil {
		p.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Connected", LastTransitionTime: metav1.Now()}}
	}
	p.Status.FailureDomains = domains
	f.g.Expect(k8s.Status().Update(f.ctx, p)).To(Succeed())
	return p
}

// vm creates a VM of class and image that selects this fixture's Providers.
func (f *fixture) vm(name string, class *banlieuev1.VMClass, image *banlieuev1.VMImage, mods ...func(*banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := builder.VirtualMachine(f.ns, name, class.Name, image.Name, builder.WithProviderSelector(map[string]string{"suite": f.ns}))
	vm.Labels = map[string]string{"app": "db"}
	for _, m := range mods {
		m(vm)
	}
	f.create(vm)
	return vm
}

// eventuallyVM waits until check passes on the named VM.
func (f *fixture) eventuallyVM(name string, check func(g Gomega, vm *banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
	f.t.Helper()
	vm := &banlieuev1.VirtualMachine{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, vm)).To(Succeed())
		check(g, vm)
	}, 20*time.Second, 50*time.Millisecond).Should(Succeed())
	return vm
}

// scheduledOn waits until the VM is placed on the given Provider and failure domain.
func (f *fixture) scheduledOn(name, providerName, failureDomain string) *banlieuev1.VirtualMachine {
	f.t.Helper()
	return f.eventuallyVM(name, func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Scheduled.IsDefined()).To(BeTrue(), "VM is not scheduled; conditions: %v", vm.Status.Conditions)
		g.Expect(vm.Status.Scheduled.ProviderName).To(Equal(providerName))
		g.Expect(vm.Status.Scheduled.FailureDomain).To(Equal(failureDomain))
	})
}

func (f *fixture) machine(name string) *testv1.TestMachine {
	m := &testv1.TestMachine{}
	if err := k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		f.t.Fatal(err)
	}
	return m
}

// update re-reads o and applies mutate until the write does not conflict.
func (f *fixture) update(o client.Object, mutate func()) {
	f.t.Helper()
	f.g.Eventually(func() error {
		if err := k8s.Get(f.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		mutate()
		return k8s.Update(f.ctx, o)
	}, 10*time.Second).Should(Succeed())
}

func condition(vm *banlieuev1.VirtualMachine, t string) *metav1.Condition {
	for i := range vm.Status.Conditions {
		if vm.Status.Conditions[i].Type == t {
			return &vm.Status.Conditions[i]
		}
	}
	return nil
}

func clientKey(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }
