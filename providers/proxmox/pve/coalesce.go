package pve

import (
	"context"
	"slices"
	"sync"
	"time"
)

// coalesced shares the runs of one listing among concurrent callers, without ever
// answering a caller with a listing read before it asked: a caller that arrives while
// a run is in flight waits for the next run, which starts when that one ends and
// answers every caller that arrived meanwhile. A provider's workers each list the
// cluster to look for one VM; on a cluster of thousands of VMs each listing is large
// for PVE to build, and sharing them divides that by the workers waiting together.
type coalesced[T any] struct {
	// running, a channel of one slot, is held by the run in flight.
	running chan struct{}
	mu      sync.Mutex
	// next is the run the callers arriving now will share; nil until one arrives.
	next *run[T]
	// sharing counts the callers waiting for next.
	sharing int
	// last is the latest run that answered without an error, for since.
	last *run[T]
}

// run is one listing and the callers waiting for it.
type run[T any] struct {
	done chan struct{}
	// started is when the run began to list, before its request went out.
	started time.Time
	val     []T
	err     error
}

func newCoalesced[T any]() *coalesced[T] {
	return &coalesced[T]{running: make(chan struct{}, 1)}
}

// do returns a copy of the items of a run of list that started after do was called.
// The run is made with the context of the caller that starts it, without its
// cancellation, so that its end does not fail the others; the client's timeouts bound it.
func (c *coalesced[T]) do(ctx context.Context, list func(context.Context) ([]T, error)) ([]T, error) {
	c.mu.Lock()
	if c.next == nil {
		c.next = &run[T]{done: make(chan struct{})}
	}
	r := c.next
	c.sharing++
	c.mu.Unlock()
	for {
		select {
		case <-r.done:
			return slices.Clone(r.val), r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		case c.running <- struct{}{}:
		}
		c.mu.Lock()
		lead := c.next == r
		if lead {
			c.next, c.sharing = nil, 0 // callers arriving from now on wait for the run after this one
		}
		c.mu.Unlock()
		if !lead {
			<-c.running // another caller started r already
			continue
		}
		r.started = time.Now()
		r.val, r.err = list(context.WithoutCancel(ctx))
		if r.err == nil {
			c.mu.Lock()
			c.last = r
			c.mu.Unlock()
		}
		<-c.running
		close(r.done)
		return slices.Clone(r.val), r.err
	}
}

// since returns a copy of the items of the latest run that answered and started at
// after or later, without listing (reused is true); when there is none, it lists as do
// does.
func (c *coalesced[T]) since(ctx context.Context, after time.Time, list func(context.Context) ([]T, error)) (items []T, reused bool, err error) {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last != nil && !last.started.Before(after) {
		return slices.Clone(last.val), true, nil
	}
	items, err = c.do(ctx, list)
	return items, false, err
}
