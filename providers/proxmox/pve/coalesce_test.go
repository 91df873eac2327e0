package pve

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Callers that arrive while a listing is in flight share the next one, never the one
// that started before they asked, and each gets a copy of its own.
func TestCoalescedCallersShareTheNextListing(t *testing.T) {
	c := newCoalesced[int]()
	started, release := make(chan int), make(chan struct{})
	runs := 0
	list := func(context.Context) ([]int, error) { //nolint:unparam // the signature coalesced.do takes
		runs++
		n := runs
		started <- n
		<-release
		return []int{n}, nil
	}
	first := make(chan []int)
	go func() {
		got, _ := c.do(context.Background(), list)
		first <- got
	}()
	<-started // run 1 is in flight
	const waiting = 5
	got := make([][]int, waiting)
	var wg sync.WaitGroup
	for i := range waiting {
		wg.Go(func() { got[i], _ = c.do(context.Background(), list) })
	}
	for { // until every one of them waits for the next run
		c.mu.Lock()
		n := c.sharing
		c.mu.Unlock()
		if n == waiting {
			break
		}
		runtime.Gosched()
	}
	release <- struct{}{}
	if g := <-first; len(g) != 1 || g[0] != 1 {
		t.Fatalf("the first caller got %v, want run 1", g)
	}
	if n := <-started; n != 2 {
		t.Fatalf("run %d started, want 2", n)
	}
	close(release)
	wg.Wait()
	for i, g := range got {
		if len(g) != 1 || g[0] != 2 {
			t.Errorf("caller %d got %v, want run 2, which started after it asked", i, g)
		}
	}
	if runs != 2 {
		t.Errorf("%d runs for %d callers, want 2", runs, waiting+1)
	}
	got[0][0] = 99
	if got[1][0] != 2 {
		t.Error("one caller's change to its listing reached another's")
	}
}

// A caller that gives up stops waiting; the run it waited for still answers the
// others, and a run's error reaches everyone who shared it.
func TestCoalescedWaitEndsWithTheContextAndErrorsAreShared(t *testing.T) {
	c := newCoalesced[int]()
	c.running <- struct{}{} // a run is in flight
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.do(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("do = %v, want the caller's context's end", err)
	}
	<-c.running
	boom := errors.New("pveproxy down")
	if _, err := c.do(context.Background(), func(context.Context) ([]int, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("do = %v, want the run's error", err)
	}
}

// since answers from the latest listing that answered and started at the time asked
// or later, and lists again when there is none; a failed listing is never reused.
func TestCoalescedSinceReusesARecentListing(t *testing.T) {
	c := newCoalesced[int]()
	runs := 0
	var fail error
	list := func(context.Context) ([]int, error) {
		runs++
		return []int{runs}, fail
	}
	ctx := context.Background()
	before := time.Now()
	if got, reused, err := c.since(ctx, before, list); err != nil || reused || len(got) != 1 || got[0] != 1 || runs != 1 {
		t.Fatalf("since with nothing listed = %v, reused %t, %v after %d runs; want run 1, listed now", got, reused, err, runs)
	}
	got, reused, err := c.since(ctx, before, list)
	if err != nil || !reused || len(got) != 1 || got[0] != 1 || runs != 1 {
		t.Fatalf("since = %v, reused %t, %v after %d runs; want run 1 again, without listing", got, reused, err, runs)
	}
	got[0] = 99
	if again, _, _ := c.since(ctx, before, list); again[0] != 1 {
		t.Error("one caller's change to its listing reached another's")
	}
	if got, reused, _ := c.since(ctx, time.Now().Add(time.Millisecond), list); got[0] != 2 || reused || runs != 2 {
		t.Fatalf("since after the last run began = %v, reused %t after %d runs; want run 2", got, reused, runs)
	}
	fail = errors.New("pveproxy down")
	if _, err := c.do(ctx, list); !errors.Is(err, fail) {
		t.Fatalf("do = %v, want the listing's error", err)
	}
	if got, reused, err := c.since(ctx, before, list); err != nil || !reused || got[0] != 2 || runs != 3 {
		t.Fatalf("since after a failed run = %v, reused %t, %v after %d runs; want run 2, the latest that answered", got, reused, err, runs)
	}
}
