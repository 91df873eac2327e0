package virtualmachine

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// adminNamespace creates a namespace for the fixture's Providers, apart from its VMs' as
// an administrator's would be. Its name sorts before every fixture's namespace, so that
// its Providers are listed first and within the message's 32 however many Providers
// the suite's other tests left behind.
func (f *fixture) adminNamespace() string {
	f.t.Helper()
	name := strings.TrimRight(("a-" + f.ns)[:min(63, len(f.ns)+2)], "-")
	f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// vmEvents returns the Events recorded on the VM name, oldest first.
func (f *fixture) vmEvents(g Gomega, name string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(f.ctx, list, client.InNamespace(f.ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "VirtualMachine" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// expectNoLeak fails when any of the VM's conditions or Events contains one of leaks.
func (f *fixture) expectNoLeak(g Gomega, vm *banlieuev1.VirtualMachine, leaks ...string) {
	events := f.vmEvents(g, vm.Name)
	texts := make([]string, 0, len(vm.Status.Conditions)+len(events))
	for _, c := range vm.Status.Conditions {
		texts = append(texts, c.Type+": "+c.Message)
	}
	for _, e := range events {
		texts = append(texts, e.Reason+" Event: "+e.Note)
	}
	for _, text := range texts {
		for _, leak := range leaks {
			g.Expect(text).NotTo(ContainSubstring(leak), "a tenant reads %q", leak)
		}
	}
}

func TestNoCandidateNamesOnlyTheProvidersThatAdmitTheVMsNamespace(t *testing.T) {
	selecting := func(team string) func(*banlieuev1.Provider) {
		return func(p *banlieuev1.Provider) {
			p.Spec.NamespaceSelector = &banlieuev1.LabelSelector{MatchLabels: map[string]string{"team": team}}
		}
	}
	for _, tc := range []struct {
		name     string
		nsLabels []string
		// admitted are the Providers the message names; excluded the ones it counts.
		admitted, excluded []string
	}{
		{"a namespace of team red sees the open Provider and red's", []string{"team", "red"}, []string{"open", "red"}, []string{"blue"}},
		{"a namespace of team blue sees the open Provider and blue's", []string{"team", "blue"}, []string{"blue", "open"}, []string{"red"}},
		{"a namespace of no team sees only the open Provider", nil, []string{"open"}, []string{"blue", "red"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.nsLabels...)
			infra := f.adminNamespace()
			// Every Provider lacks the class's feature; each one for a team says much about
			// itself that no other team may read.
			class, image := f.class("c", func(c *banlieuev1.VMClass) { c.Spec.Features = []string{"gpu"} }), f.image("i")
			providers := make([]*banlieuev1.Provider, 0, 3)
			providers = append(providers, f.providerIn(infra, "open", nil))
			for _, team := range []string{"red", "blue"} {
				providers = append(providers, f.providerIn(infra, team, []banlieuev1.FailureDomain{builder.FailureDomain("rack-" + team)}, selecting(team), func(p *banlieuev1.Provider) {
					p.Spec.Connection = banlieuev1.Connection{Endpoint: "https://vc-" + team + ".example/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: team + "-creds"}}
				}))
			}
			// The open Provider would be named in every other test's message.
			t.Cleanup(func() {
				for _, p := range providers {
					NewWithT(t).Expect(client.IgnoreNotFound(k8s.Delete(f.ctx, p))).To(Succeed())
				}
			})
			named := make([]string, 0, len(tc.admitted))
			for _, name := range tc.admitted {
				named = append(named, fmt.Sprintf(`%s/%s: feature "gpu" is not in its capabilities`, infra, name))
			}
			// The suite's other tests leave Providers for other namespaces behind: they are
			// counted with this test's, after the Providers named.
			count := regexp.MustCompile(`; (\d+) Providers? do(?:es)? not admit namespace "` + regexp.QuoteMeta(f.ns) + `"$`)
			f.vm("v", class, image)
			vm := f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
				c := condition(vm, banlieuev1.VirtualMachineScheduledCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(banlieuev1.VirtualMachineNoCandidateReason))
				g.Expect(c.Message).To(HavePrefix("no Provider can run this VM: "+strings.Join(named, "; ")+"; "), "the admitted Providers come first, in name order")
				n := count.FindStringSubmatch(c.Message)
				g.Expect(n).NotTo(BeNil(), "the message does not end with the count of Providers that do not admit the namespace")
				g.Expect(strconv.Atoi(n[1])).To(BeNumerically(">=", len(tc.excluded)))
			})
			msg := condition(vm, banlieuev1.VirtualMachineScheduledCondition).Message
			f.g.Eventually(func(g Gomega) []string {
				var notes []string
				for _, e := range f.vmEvents(g, "v") {
					if e.Reason == banlieuev1.VirtualMachineNoCandidateReason && e.Type == corev1.EventTypeWarning {
						notes = append(notes, e.Note)
					}
				}
				return notes
			}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(truncate(msg, maxNoteBytes)), "the Warning says what the condition says, cut")
			for _, name := range tc.excluded {
				f.expectNoLeak(f.g, vm, infra+"/"+name, "vc-"+name, name+"-creds", "rack-"+name)
			}
		})
	}
}

func TestMachineMessagesReachTheVMSanitizedAndCut(t *testing.T) {
	f := newFixture(t)
	class, image := f.class("c"), f.image("i")
	f.create(builder.Secret(f.ns, "vc-creds", map[string][]byte{"username": []byte("admin"), "password": []byte("pw")}))
	f.provider("p1", nil, func(p *banlieuev1.Provider) {
		p.Spec.Connection = banlieuev1.Connection{Endpoint: "https://vc.example/sdk", CredentialsRef: banlieuev1.LocalObjectReference{Name: "vc-creds"}}
	})
	f.vm("v", class, image)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(vm.Status.Phase).To(Equal(banlieuev1.PhaseRunning), "conditions: %v", vm.Status.Conditions)
	})

	// The machine paused by Cluster API's annotation is left alone by its provider, so
	// the test can write what the provider would have reported.
	m := f.machine("v")
	f.update(m, func() { m.Annotations = map[string]string{providersdk.PausedAnnotation: ""} })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, clientKey(m), m)).To(Succeed())
		g.Expect(m.Status.Conditions).To(ContainElement(And(HaveField("Type", "Paused"), HaveField("Status", metav1.ConditionTrue))))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	report := func(reason, message string) {
		f.t.Helper()
		f.g.Eventually(func() error {
			if err := k8s.Get(f.ctx, clientKey(m), m); err != nil {
				return err
			}
			for i := range m.Status.Conditions {
				if c := &m.Status.Conditions[i]; c.Type == banlieuev1.ReadyCondition {
					c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, message
				}
			}
			return k8s.Status().Update(f.ctx, m)
		}, 10*time.Second).Should(Succeed())
	}

	report("LoginFailed", fmt.Sprintf("cannot log in to https://admin:pw@vc.example/sdk?token=x with Secret %s/vc-creds", f.ns))
	const want = "cannot log in to the backend with the Provider's credentials Secret"
	vm := f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition).Message).To(Equal(want))
		g.Expect(condition(vm, banlieuev1.ReadyCondition).Message).To(Equal(want))
	})
	f.expectEvent("v", banlieuev1.VirtualMachineInfrastructureFailedReason, corev1.EventTypeWarning, "TestMachine v is not Ready: LoginFailed ("+want+")")
	f.expectNoLeak(f.g, vm, "vc.example", "admin", "pw", "token", "vc-creds")

	// A message longer than an Event may be reaches the VM's conditions whole and its
	// Event cut, on a rune boundary.
	long := strings.Repeat("disque plein é; ", 200)
	report("DiskFull", long)
	f.eventuallyVM("v", func(g Gomega, vm *banlieuev1.VirtualMachine) {
		g.Expect(condition(vm, banlieuev1.VirtualMachineInfrastructureReadyCondition).Message).To(Equal(long))
	})
	f.g.Eventually(func(g Gomega) {
		var note string
		for _, e := range f.vmEvents(g, "v") {
			if strings.HasPrefix(e.Note, "TestMachine v is not Ready: DiskFull") {
				note = e.Note
			}
		}
		g.Expect(note).NotTo(BeEmpty(), "no Event for the long message")
		g.Expect(len(note)).To(BeNumerically("<=", maxNoteBytes))
		g.Expect(len(note)).To(BeNumerically(">", maxNoteBytes-utf8.UTFMax-len(ellipsis)), "the note is cut no shorter than it must be")
		g.Expect(note).To(HaveSuffix(ellipsis))
		g.Expect(utf8.ValidString(note)).To(BeTrue(), "the note is cut inside a rune")
		g.Expect(long).To(HavePrefix(strings.TrimSuffix(strings.TrimPrefix(note, "TestMachine v is not Ready: DiskFull ("), ellipsis)))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"a text that fits is unchanged", "disk full", 9, "disk full"},
		{"a text one byte too long is cut with an ellipsis", "disk fulls", 9, "disk f" + ellipsis},
		{"a cut inside a rune moves back to its start", "ab" + "é" + "cdefg", 6, "ab" + ellipsis},
		{"a cut just after a rune keeps it", "abé" + "cdefg", 7, "abé" + ellipsis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := truncate(tc.in, tc.max)
			if got != tc.want || len(got) > tc.max || !utf8.ValidString(got) {
				t.Errorf("truncate(%q, %d) = %q (%d bytes), want %q", tc.in, tc.max, got, len(got), tc.want)
			}
		})
	}
}
