package proxmox

import (
	"context"
	"testing"
	"time"
)

// The pool's answers, step by step, against a PVE whose /cluster/nextid says free.
func TestVMIDPool(t *testing.T) {
	type step struct {
		// take a VMID at after (from the start), or end the flight of done.
		take  bool
		after time.Duration
		done  int
		taken bool
		// want is the VMID taken; asked whether PVE was asked for it.
		want  int
		asked bool
	}
	tests := []struct {
		name  string
		free  []int // what PVE answers, one per ask
		steps []step
	}{
		{
			name: "asks once, then counts up past the VMIDs in flight",
			free: []int{100},
			steps: []step{
				{take: true, want: 100, asked: true},
				{take: true, want: 101},
				{done: 100},
				{take: true, want: 102},
			},
		},
		{
			name: "a VMID another client took sends the next take to PVE, skipping those in flight",
			free: []int{100, 101},
			steps: []step{
				{take: true, want: 100, asked: true},
				{take: true, want: 101},
				{done: 100, taken: true},
				{take: true, want: 102, asked: true}, // PVE says 101, in flight
			},
		},
		{
			name: "asks again after a minute with nothing in flight, to use freed VMIDs",
			free: []int{100, 100},
			steps: []step{
				{take: true, want: 100, asked: true},
				{done: 100},
				{take: true, after: 30 * time.Second, want: 101},
				{done: 101},
				{take: true, after: vmidRefresh + time.Second, want: 100, asked: true},
			},
		},
		{
			name: "keeps counting after a minute while a VMID is in flight",
			free: []int{100},
			steps: []step{
				{take: true, want: 100, asked: true},
				{take: true, after: vmidRefresh + time.Second, want: 101},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newVMIDPool()
			start := time.Now()
			asks := 0
			ask := func(context.Context) (int, error) {
				if asks >= len(tt.free) {
					t.Fatalf("asked PVE %d times, more than expected", asks+1)
				}
				asks++
				return tt.free[asks-1], nil
			}
			for i, st := range tt.steps {
				if !st.take {
					p.done(st.done, st.taken)
					continue
				}
				before := asks
				got, err := p.take(context.Background(), start.Add(st.after), ask)
				if err != nil || got != st.want || (asks > before) != st.asked {
					t.Fatalf("step %d: take = %d, %v (asked PVE: %t); want %d (asked: %t)", i, got, err, asks > before, st.want, st.asked)
				}
			}
		})
	}
}

// A worker waiting for the pool while another asks PVE gives up with its context.
func TestVMIDPoolWaitEndsWithTheContext(t *testing.T) {
	p := newVMIDPool()
	p.lock <- struct{}{} // another worker is asking
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.take(ctx, time.Now(), func(context.Context) (int, error) { return 100, nil }); err == nil {
		t.Fatal("take returned a VMID while the pool was held and the context ended")
	}
}
