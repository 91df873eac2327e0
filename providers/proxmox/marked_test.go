package proxmox

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

func TestListMarkedFindsTheMachinesVMsByTheirTags(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim))
	want := make([]providersdk.MarkedVM, 0, 2)
	for _, uid := range []string{"0e1d2c3b-1c8a-4a52-9a55-0c3c0b1f0a0a", "7f6e5d4c-1c8a-4a52-9a55-0c3c0b1f0a0b"} {
		m := newMachine(uid)
		o := converge(t, s, m)
		want = append(want, providersdk.MarkedVM{ProviderID: o.ProviderID, Name: machineVMName(m.Namespace, m.Name), MachineUID: m.UID})
	}
	// The second machine goes without its VM being deleted: its VM is still listed, for
	// the Provider controller to find no machine of that UID. The simulator's templates
	// carry no machine's tag. The listing shows what pvestatd last reported: a round
	// now reports the clones' names.
	sim.ReportStatus()
	got, err := s.ListMarked(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	less := func(a, b providersdk.MarkedVM) bool { return a.ProviderID < b.ProviderID }
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(less)); diff != "" {
		t.Errorf("ListMarked (-want +got):\n%s", diff)
	}
}
