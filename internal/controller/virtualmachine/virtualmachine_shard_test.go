package virtualmachine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/sharding"
)

func TestEveryNamespaceIsClaimedByExactlyOneShardOfACount(t *testing.T) {
	for _, count := range []int{1, 2, 3, 7} {
		shards := make([]*Shard, count)
		for i := range shards {
			shards[i] = mustShard(t, i, count, "")
		}
		per := make([]int, count)
		for n := range 1000 {
			ns := fmt.Sprintf("tenant-%d", n)
			claimed := 0
			for i, s := range shards {
				if s.Claims(ns, nil) {
					claimed++
					per[i]++
				}
			}
			if claimed != 1 {
				t.Fatalf("namespace %s is claimed by %d of %d shards, want 1", ns, claimed, count)
			}
		}
		// The hash spreads: no shard of a few has less than half its share.
		for i, n := range per {
			if n < 1000/count/2 {
				t.Errorf("shard %d of %d claims %d of 1000 namespaces", i, count, n)
			}
		}
	}
}

func TestAShardThatDoesNotExistIsRefused(t *testing.T) {
	for _, tt := range []struct {
		index, count int
		selector     string
	}{{0, 0, ""}, {2, 2, ""}, {-1, 2, ""}, {0, 1, "team in a"}} {
		if _, err := NewShard(tt.index, tt.count, tt.selector, "", sharding.DefaultTiming); err == nil {
			t.Errorf("NewShard(%d, %d, %q) took it", tt.index, tt.count, tt.selector)
		}
	}
	if _, err := NewShard(0, 1, "", "", sharding.Timing{Renew: time.Minute, Duration: time.Minute}); err == nil {
		t.Error("NewShard took a registration that expires before its second renewal")
	}
}

func TestACoreShardActsOnlyOnTheNamespacesItAloneClaims(t *testing.T) {
	ctx := context.Background()
	team := map[string]string{"team": "a"}
	// lease is another shard's registration, renewed at renewed.
	lease := func(name, index, count, selector string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: sharding.DefaultNamespace, Name: name, Labels: map[string]string{CoreShardLabel: "core"},
				Annotations: map[string]string{CoreShardIndexAnnotation: index, CoreShardCountAnnotation: count, CoreShardSelectorAnnotation: selector}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To(int32(90))},
		}
	}
	now, old := time.Now(), time.Now().Add(-time.Hour)
	mine := namespaceOf(t, 0, 2)
	for _, tt := range []struct {
		name     string
		index    int
		count    int
		selector string
		others   []client.Object
		register bool
		ns       string
		labels   map[string]string
		want     decision
		why      string
	}{
		{name: "alone, its namespace", count: 2, register: true, ns: mine, want: serve},
		{name: "another shard's namespace", index: 1, count: 2, register: true, ns: mine, want: skip},
		{name: "not registered yet, while sharing the work", count: 2, ns: mine, want: hold, why: "is not renewed yet"},
		{name: "a lone core needs no registration", count: 1, ns: mine, want: serve},
		{name: "an old lone core still runs", count: 2, register: true, ns: mine,
			others: []client.Object{lease("banlieue-core-old", "0", "1", "", now)}, want: hold, why: "claimed by core shards"},
		{name: "an old lone core's registration expired", count: 2, register: true, ns: mine,
			others: []client.Object{lease("banlieue-core-old", "0", "1", "", old)}, want: serve},
		{name: "a shard of the other half", count: 2, register: true, ns: mine,
			others: []client.Object{lease("banlieue-core-other", "1", "2", "", now)}, want: serve},
		{name: "a shard whose selector matches", count: 2, register: true, ns: mine, labels: team,
			others: []client.Object{lease("banlieue-core-team", "0", "1", "team=a", now)}, want: hold, why: "banlieue-core-team"},
		{name: "a shard whose selector does not match", count: 2, register: true, ns: mine,
			others: []client.Object{lease("banlieue-core-team", "0", "1", "team=a", now)}, want: serve},
		{name: "a registration that does not parse claims everything", count: 2, register: true, ns: mine,
			others: []client.Object{lease("banlieue-core-odd", "zero", "2", "", now)}, want: hold, why: "banlieue-core-odd"},
		{name: "its own selector does not match", count: 1, selector: "team=a", register: true, ns: mine, want: skip},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.others...).Build()
			s := mustShard(t, tt.index, tt.count, tt.selector)
			s.Registry().Bind(c, c, 0)
			if tt.register {
				if err := s.Registry().Renew(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got, why, err := s.decide(ctx, tt.ns, tt.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(why, tt.why) {
				t.Errorf("decide = %v %q, want %v with %q", got, why, tt.want, tt.why)
			}
		})
	}
}

func TestAShardCachesOfOtherNamespacesOnlyWhatPlacementCounts(t *testing.T) {
	s := mustShard(t, 0, 2, "")
	scheduled := banlieuev1.ScheduledPlacement{ProviderNamespace: "infra", ProviderName: "dc1", FailureDomain: "rack-1"}
	vmIn := func(ns string) *banlieuev1.VirtualMachine {
		vm := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "u1", Labels: map[string]string{"app": "web"}}}
		vm.Spec.ClassRef.Name = "small"
		vm.Status.Scheduled = scheduled
		return vm
	}
	mine, theirs := namespaceOf(t, 0, 2), namespaceOf(t, 1, 2)

	kept, err := s.TrimOthers(vmIn(mine))
	if err != nil {
		t.Fatal(err)
	}
	if vm := kept.(*banlieuev1.VirtualMachine); vm.Spec.ClassRef.Name != "small" || vm.Labels["app"] != "web" {
		t.Errorf("a VM of the shard's own namespace was trimmed: %+v", vm)
	}
	trimmed, err := s.TrimOthers(vmIn(theirs))
	if err != nil {
		t.Fatal(err)
	}
	vm := trimmed.(*banlieuev1.VirtualMachine)
	if vm.Spec.ClassRef.Name != "" || vm.Labels != nil || vm.Name != "web" || vm.UID != "u1" {
		t.Errorf("another shard's VM kept more than its identity: %+v", vm)
	}
	if vm.Status.Scheduled != scheduled {
		t.Errorf("another shard's VM lost its placement, which placement counts: %+v", vm.Status.Scheduled)
	}

	m := &contract.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: "infrastructure.example.com/v1", Kind: "ExampleMachine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: theirs, Name: "web", OwnerReferences: []metav1.OwnerReference{{Name: "web", UID: "u1"}}},
		Spec:       infrav1.MachineSpec{Hardware: infrav1.MachineHardware{CPUs: 2}},
	}
	out, err := s.TrimOthers(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*contract.Machine); !equality.Semantic.DeepEqual(got.Spec, infrav1.MachineSpec{}) || len(got.OwnerReferences) != 1 || got.Kind != "ExampleMachine" {
		t.Errorf("another shard's machine: %+v, want its identity and owner only", got)
	}
}

// mustShard is core shard index of count with selector.
func mustShard(t *testing.T, index, count int, selector string) *Shard {
	t.Helper()
	s, err := NewShard(index, count, selector, "", sharding.DefaultTiming)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// namespaceOf returns a namespace that shard index of count claims.
func namespaceOf(t *testing.T, index, count int) string {
	t.Helper()
	for n := range 100 {
		if ns := fmt.Sprintf("ns-%d", n); int(namespaceHash(ns)%uint32(count)) == index {
			return ns
		}
	}
	t.Fatalf("no namespace of shard %d of %d", index, count)
	return ""
}
