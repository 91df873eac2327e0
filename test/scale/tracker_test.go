package main

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestPercentileIsTheNearestRank(t *testing.T) {
	s := time.Second
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * s // 100 s … 1 s, unsorted on purpose
	}
	for _, tt := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"no VM", nil, 50, 0},
		{"one VM is every percentile", []time.Duration{7 * s}, 99, 7 * s},
		{"p50 of 1…100 s", hundred, 50, 50 * s},
		{"p95 of 1…100 s", hundred, 95, 95 * s},
		{"p99 of 1…100 s", hundred, 99, 99 * s},
		{"p100 is the slowest", hundred, 100, 100 * s},
		{"p50 of four rounds up to the second", []time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 50, 2 * s},
		{"p99 of four is the slowest", []time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 99, 4 * s},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
			}
		})
	}
	if hundred[0] != 100*s {
		t.Error("percentile sorted its argument in place")
	}
}

func TestTrackerCountsEntriesIntoAndExitsFromReady(t *testing.T) {
	vm := func(name, be string, ready bool) *banlieuev1.VirtualMachine {
		v := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{backendLabel: be}}}
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
		}
		v.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: status}}
		return v
	}
	type change struct {
		backend string
		delta   int
	}
	for _, tt := range []struct {
		name   string
		events func(tr *tracker)
		want   []change
	}{
		{"created, not Ready yet", func(tr *tracker) { tr.observe(vm("a", "x", false)) }, nil},
		{"becomes Ready once, however often seen Ready", func(tr *tracker) {
			tr.observe(vm("a", "x", false))
			tr.observe(vm("a", "x", true))
			tr.observe(vm("a", "x", true))
		}, []change{{"x", 1}}},
		{"leaves Ready and comes back", func(tr *tracker) {
			tr.observe(vm("a", "x", true))
			tr.observe(vm("a", "x", false))
			tr.observe(vm("a", "x", true))
		}, []change{{"x", 1}, {"x", -1}, {"x", 1}}},
		{"deleted while Ready", func(tr *tracker) {
			tr.observe(vm("a", "x", true))
			tr.forget(vm("a", "x", true))
		}, []change{{"x", 1}, {"x", -1}}},
		{"deleted after leaving Ready counts once", func(tr *tracker) {
			tr.observe(vm("a", "x", true))
			tr.observe(vm("a", "x", false))
			tr.forget(vm("a", "x", false))
		}, []change{{"x", 1}, {"x", -1}}},
		{"each VM under its backend", func(tr *tracker) {
			tr.observe(vm("a", "x", true))
			tr.observe(vm("b", "y", true))
			tr.forget(vm("b", "y", true))
		}, []change{{"x", 1}, {"y", 1}, {"y", -1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker()
			tt.events(tr)
			changes := tr.readyChanges()
			got := make([]change, 0, len(changes))
			for _, c := range changes {
				got = append(got, change{c.backend, c.delta})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
		})
	}
}

// A VM's creation and Ready times are the object's own, however late the watch shows
// them: a watch read late must not make every VM look Ready at once.
func TestTrackerTakesTimesFromTheObjectNotTheWatch(t *testing.T) {
	created := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	readyAt := created.Add(42 * time.Second)
	v := &banlieuev1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, Name: "vm-1", Labels: map[string]string{backendLabel: "vsphere"}, CreationTimestamp: metav1.NewTime(created),
	}}
	v.Status.Conditions = []metav1.Condition{{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)}}
	tr := newTracker()
	tr.observe(v) // long after both, as a late watch delivers it
	if got := tr.latencies()["vsphere"]; len(got) != 1 || got[0] != 42*time.Second {
		t.Errorf("created → Ready %v, want [42s], the object's own times", got)
	}
	if got := tr.lastReadyBy(created)["vsphere"]; got != 42*time.Second {
		t.Errorf("Ready %v after the start, want 42s", got)
	}
	if ch := tr.readyChanges(); len(ch) != 1 || !ch[0].at.Equal(readyAt) {
		t.Errorf("Ready changes %+v, want one at the condition's transition", ch)
	}
}
