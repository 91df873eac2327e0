package providersdk_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/event"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// guests is a backend of running VMs, named after their machines, whose guests report
// an address once the test gives them one. It counts the looks it is given.
type guests struct {
	mu        sync.Mutex
	addresses map[string]string // machine name -> address
	off       map[string]bool   // machine names whose VMs are powered off
	observes  int
	reports   int
}

func newGuests() *guests { return &guests{addresses: map[string]string{}, off: map[string]bool{}} }

func (g *guests) setAddress(name, address string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addresses[name] = address
}

func (g *guests) counts() (observes, reports int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.observes, g.reports
}

// reportingClient is a session that is a GuestAddressReporter.
type reportingClient struct {
	providersdk.ClientFns
	providersdk.GuestAddressReporterFunc
}

// driver returns the backend's Driver; its sessions report guests' addresses when
// reporting is true.
func (g *guests) driver(reporting bool) providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		fns := providersdk.ClientFns{ObserveFn: g.observe}
		if !reporting {
			return fns, nil
		}
		return reportingClient{fns, g.report}, nil
	})
}

func (g *guests) observe(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.observes++
	o := providersdk.Observation{Exists: true, UpToDate: true, ProviderID: "test://" + m.Name, PowerState: banlieuev1.PowerStatePoweredOn}
	if g.off[m.Name] {
		o.PowerState = banlieuev1.PowerStatePoweredOff
		return o, nil
	}
	if a := g.addresses[m.Name]; a != "" {
		o.Addresses = []banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: a}}
	}
	o.WaitingForGuest = len(o.Addresses) == 0
	return o, nil
}

func (g *guests) report(context.Context) (map[string]bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reports++
	out := map[string]bool{"test://a-vm-of-another-provider": true}
	for name, a := range g.addresses {
		if a != "" && !g.off[name] {
			out["test://"+name] = true
		}
	}
	return out, nil
}

// guestsClass is the provider class of these tests' Providers: a class of their own,
// so that the Providers they make Ready are no other test's (the image tests resolve
// images on every Ready Provider of the test class).
const guestsClass = "guests"

func guestsProvider(p *banlieuev1.Provider) { p.Spec.ProviderClassRef.Name = guestsClass }

func TestAReportedGuestIsLookedAtOnlyForAShortWindow(t *testing.T) {
	for _, tt := range []struct {
		name      string
		reporting bool
		want      []time.Duration
	}{
		{"a session that reports guests' addresses: the window", true, []time.Duration{time.Second, 2 * time.Second, 0, 0}},
		{"any other session: the long backoff", false, []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			r := providersdk.NewReconciler(k8s, testMachineGVK, newGuests().driver(tt.reporting), providersdk.WithFinalizer(provider.Finalizer),
				providersdk.WithGuestWindow(time.Second, 2*time.Second, 2), providersdk.WithGuestBackoff(3*time.Second, time.Minute, 3))
			m := e.machine("web")
			afters := make([]time.Duration, 0, 4)
			for range 4 {
				afters = append(afters, e.mustReconcile(r, m).RequeueAfter)
			}
			if diff := cmp.Diff(tt.want, afters); diff != "" {
				t.Errorf("requeue intervals (-want +got):\n%s", diff)
			}
		})
	}
}

// The looks of a guest window at the machines of a reporting session ask the backend
// once for the Provider, an answer shared by the looks of the window's first interval,
// and observe no VM; a machine whose VM the answer lists is observed, and gets its
// address.
func TestTheGuestWindowsLooksShareOneAnswerPerProvider(t *testing.T) {
	for _, tt := range []struct {
		name     string
		base     time.Duration // the window's first interval, as long as an answer serves
		address  string        // the machine whose guest reports an address before the looks
		observes int
		reports  int
	}{
		{name: "three looks within one interval", base: time.Hour, reports: 1},
		{name: "three looks, each after the last answer aged", base: time.Nanosecond, reports: 3},
		{name: "a look at the machine whose guest reports", base: time.Nanosecond, address: "b", observes: 1, reports: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			g := newGuests()
			r := providersdk.NewReconciler(k8s, testMachineGVK, g.driver(true), providersdk.WithFinalizer(provider.Finalizer),
				providersdk.WithGuestWindow(tt.base, tt.base, 5))
			machines := []*testv1.TestMachine{e.machine("a"), e.machine("b"), e.machine("c")}
			for _, m := range machines {
				e.mustReconcile(r, m) // Ready without an address: its window begins
			}
			if tt.address != "" {
				g.setAddress(tt.address, "192.0.2.9")
			}
			observes, reports := g.counts()
			for _, m := range machines {
				e.mustReconcile(r, m)
			}
			observesAfter, reportsAfter := g.counts()
			if observesAfter-observes != tt.observes || reportsAfter-reports != tt.reports {
				t.Errorf("the looks observed %d VMs and asked for %d answers, want %d and %d",
					observesAfter-observes, reportsAfter-reports, tt.observes, tt.reports)
			}
			for _, m := range machines {
				got := e.get(m)
				if want := map[bool]int{true: 1}[m.Name == tt.address]; len(got.Status.Addresses) != want {
					t.Errorf("%s has %d addresses, want %d", m.Name, len(got.Status.Addresses), want)
				}
			}
		})
	}
}

// woken drains the machines sent on ch, by name.
func woken(ch chan event.GenericEvent) []string {
	var names []string
	for {
		select {
		case ev := <-ch:
			names = append(names, ev.Object.GetName())
		default:
			slices.Sort(names)
			return names
		}
	}
}

func TestTheProviderRefreshWakesTheMachinesWhoseGuestsNowReportAnAddress(t *testing.T) {
	e := newEnv(t, guestsProvider)
	g := newGuests()
	g.setAddress("addressed", "192.0.2.1")
	g.off["off"] = true
	machines := providersdk.NewReconciler(k8s, testMachineGVK, g.driver(true), providersdk.WithFinalizer(provider.Finalizer), providersdk.WithClass(guestsClass))
	created := map[string]*testv1.TestMachine{}
	for _, name := range []string{"waking", "silent", "addressed", "off"} {
		created[name] = e.machine(name)
		e.mustReconcile(machines, created[name])
	}
	wakeups := make(chan event.GenericEvent, 10)
	pr := providersdk.NewProviderReconciler(k8s, guestsClass, testMachineGVK, providersdk.NewSessions(g.driver(true), k8s), time.Minute,
		providersdk.WithMachineWakeups(wakeups), providersdk.WithMachineReader(machineCache))

	// Nothing reports an address yet that a machine lacks: one look, nobody woken.
	e.reconcileProvider(pr)
	if _, reports := g.counts(); reports != 1 {
		t.Errorf("%d looks at the guests with two machines waiting, want 1", reports)
	}
	if got := woken(wakeups); len(got) != 0 {
		t.Errorf("woken %v, want none", got)
	}

	g.setAddress("waking", "192.0.2.2")
	e.reconcileProvider(pr)
	if diff := cmp.Diff([]string{"waking"}, woken(wakeups)); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}

	// Once every running machine has its address, the Provider refresh asks nothing.
	g.setAddress("silent", "192.0.2.3")
	for _, name := range []string{"waking", "silent"} {
		e.mustReconcile(machines, created[name])
	}
	_, before := g.counts()
	e.reconcileProvider(pr)
	if _, reports := g.counts(); reports != before {
		t.Errorf("the refresh looked at the guests %d times with no machine waiting, want 0", reports-before)
	}
	if got := woken(wakeups); len(got) != 0 {
		t.Errorf("woken %v, want none", got)
	}
}

func TestAMachineWokenByTheProviderGetsItsAddressWithoutLooksInBetween(t *testing.T) {
	e := newEnv(t, guestsProvider)
	g := newGuests()
	e.run(providersdk.Config{
		Class: guestsClass, MachineKind: testMachineGVK, Driver: g.driver(true),
		InventoryInterval: 200 * time.Millisecond,
		MachineOptions:    []providersdk.Option{providersdk.WithGuestWindow(10*time.Millisecond, 20*time.Millisecond, 2)},
	})

	m := e.machine("web")
	eventually(t, "the machine is Ready", func() bool {
		got := e.get(m)
		return readyOf(got).Status == "True" && got.Spec.ProviderID != ""
	})
	// Past the window and the events of the first reconciles, nothing looks at the VM,
	// while the Provider refresh asks about the guests, once per refresh.
	time.Sleep(time.Second)
	observes, reports := g.counts()
	time.Sleep(time.Second)
	observesAfter, reportsAfter := g.counts()
	if observesAfter != observes {
		t.Errorf("the VM was looked at %d times in a second after its window", observesAfter-observes)
	}
	if reportsAfter-reports < 2 {
		t.Errorf("the Provider asked about the guests %d times in a second of 200ms refreshes, want at least 2", reportsAfter-reports)
	}

	g.setAddress("web", "192.0.2.7")
	eventually(t, "the machine has its address", func() bool {
		got := e.get(m)
		return len(got.Status.Addresses) == 1 && got.Status.Addresses[0].Address == "192.0.2.7"
	})
	if observes, _ := g.counts(); observes-observesAfter > 2 {
		t.Errorf("the VM was looked at %d times to get its address, want 1 (2 with a stale cache)", observes-observesAfter)
	}
	// With every machine addressed, the refresh asks the backend nothing more.
	time.Sleep(500 * time.Millisecond)
	_, reports = g.counts()
	time.Sleep(time.Second)
	if _, reportsAfter := g.counts(); reportsAfter != reports {
		t.Errorf("the Provider asked about the guests %d times with every machine addressed", reportsAfter-reports)
	}
}

// eventually polls cond until it holds, failing the test after ten seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	const timeout = 10 * time.Second
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
	}
}
