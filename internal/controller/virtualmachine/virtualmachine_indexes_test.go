package virtualmachine

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolscache "k8s.io/client-go/tools/cache"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/placement"
)

// placedVM is a VM placed on Provider infra/name in failure domain fd; an unplaced VM
// when name is empty.
func placedVM(name, fd string) *banlieuev1.VirtualMachine {
	vm := &banlieuev1.VirtualMachine{}
	if name != "" {
		vm.Status.Scheduled = banlieuev1.ScheduledPlacement{ProviderNamespace: "infra", ProviderName: name, FailureDomain: fd}
	}
	return vm
}

// TestLocationLoadFollowsTheInformersEvents specifies the counts placement reads: each
// of the informer's events moves a VM between locations, and a location left empty is
// forgotten.
func TestLocationLoadFollowsTheInformersEvents(t *testing.T) {
	type event struct{ before, now any }
	loc := func(name, fd string) placement.Location {
		return placement.Location{ProviderNamespace: "infra", ProviderName: name, FailureDomain: fd}
	}
	for _, tc := range []struct {
		name   string
		events []event
		want   map[placement.Location]int
	}{
		{
			name:   "placed VMs added count in their locations",
			events: []event{{nil, placedVM("a", "fd-1")}, {nil, placedVM("a", "fd-1")}, {nil, placedVM("a", "fd-2")}},
			want:   map[placement.Location]int{loc("a", "fd-1"): 2, loc("a", "fd-2"): 1},
		},
		{
			name:   "a VM not placed yet counts nowhere, and counts once placed",
			events: []event{{nil, placedVM("", "")}, {placedVM("", ""), placedVM("a", "fd-1")}},
			want:   map[placement.Location]int{loc("a", "fd-1"): 1},
		},
		{
			name:   "a VM that moves counts only where it is now",
			events: []event{{nil, placedVM("a", "fd-1")}, {placedVM("a", "fd-1"), placedVM("b", "fd-1")}},
			want:   map[placement.Location]int{loc("b", "fd-1"): 1},
		},
		{
			name:   "an update that keeps the location changes nothing",
			events: []event{{nil, placedVM("a", "fd-1")}, {placedVM("a", "fd-1"), placedVM("a", "fd-1")}},
			want:   map[placement.Location]int{loc("a", "fd-1"): 1},
		},
		{
			name:   "a VM whose placement is cleared (a migration) no longer counts",
			events: []event{{nil, placedVM("a", "fd-1")}, {placedVM("a", "fd-1"), placedVM("", "")}},
			want:   map[placement.Location]int{},
		},
		{
			name: "a deleted VM no longer counts, also when the informer missed its deletion",
			events: []event{
				{nil, placedVM("a", "fd-1")}, {nil, placedVM("a", "fd-1")},
				{placedVM("a", "fd-1"), nil},
				{toolscache.DeletedFinalStateUnknown{Key: "team-a/vm", Obj: placedVM("a", "fd-1")}, nil},
			},
			want: map[placement.Location]int{},
		},
		{
			name:   "objects that are not VMs are ignored",
			events: []event{{nil, "not a VM"}, {"not a VM", nil}},
			want:   map[placement.Location]int{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &locationLoad{counts: map[placement.Location]int{}}
			for _, e := range tc.events {
				l.move(e.before, e.now)
			}
			if diff := cmp.Diff(tc.want, l.counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			for at, n := range tc.want {
				if got := l.count(at); got != n {
					t.Errorf("count(%v) = %d, want %d", at, got, n)
				}
			}
		})
	}
}

// TestLocationLoadWaitsUntilTheStartingListIsCounted: placement does not read counts
// still filling after a start, and a reconcile that ends while it waits is let go.
func TestLocationLoadWaitsUntilTheStartingListIsCounted(t *testing.T) {
	counted := false
	l := &locationLoad{counts: map[placement.Location]int{}, synced: func() bool { return counted }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l.wait(ctx) {
		t.Error("wait returned true before the starting list was counted")
	}
	counted = true
	if !l.wait(context.Background()) {
		t.Error("wait returned false once the starting list was counted")
	}
}
