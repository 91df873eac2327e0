package libvirt

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestListMarkedReadsTheMachinesFromTheDomainsMetadata(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	off := func(m *providersdk.Machine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff }
	want := map[types.UID]providersdk.MarkedVM{}
	for _, name := range []string{"kept-" + uuid.NewString()[:8], "gone-" + uuid.NewString()[:8]} {
		m := machine(name, off)
		if _, err := s.Create(ctx, m, mustObserve(t, s, m)); err != nil {
			t.Fatalf("create: %v", err)
		}
		o := mustObserve(t, s, m)
		if !o.Exists {
			t.Fatalf("no domain for %s after Create", name)
		}
		want[m.UID] = providersdk.MarkedVM{ProviderID: o.ProviderID, Name: domainOf(o).Name, MachineUID: m.UID,
			Machine: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}}
	}
	// The second machine goes without its domain being undefined: its domain is still
	// listed, for the Provider controller to find no machine of that UID. Domains of
	// other tests on the shared daemon are listed too; only these two are looked at.
	marked, err := s.ListMarked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[types.UID]providersdk.MarkedVM{}
	for _, vm := range marked {
		if vm.MachineUID == "" {
			t.Errorf("a domain is listed without a machine UID: %+v", vm)
		}
		if _, ok := want[vm.MachineUID]; ok {
			got[vm.MachineUID] = vm
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListMarked (-want +got):\n%s", diff)
	}
}
