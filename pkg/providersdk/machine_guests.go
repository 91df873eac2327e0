package providersdk

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// guestLooks makes the looks of a guest window (WithGuestWindow) at machines whose
// session is a GuestAddressReporter cost one GuestsWithAddresses call per Provider, at
// most one every maxAge, instead of an Observe per machine per look. With 1,000 VMs
// created at once on vcsim, whose guests report no address, the window's looks were
// 2.8 of the 6.8 vCenter reads per VM to Ready, and all Ready took 1.46 times as
// long with them as without. A machine whose VM the answer lists is reconciled in
// full, and picks its address up by Observe as before.
type guestLooks struct {
	// maxAge is how old an answer may be to serve a look: the window's first interval.
	maxAge time.Duration

	mu sync.Mutex
	// looking holds the machines, by UID, in their guest window: a look was handed out
	// and the window has not ended.
	looking map[types.UID]bool
	// answers are each Provider's, by UID.
	answers map[types.UID]*guestAnswer
}

// guestAnswer is one Provider's last GuestsWithAddresses answer.
type guestAnswer struct {
	// mu is held while the backend is asked, so that looks meanwhile wait for that
	// answer instead of asking too.
	mu  sync.Mutex
	at  time.Time
	ids map[string]bool
}

func newGuestLooks(maxAge time.Duration) *guestLooks {
	return &guestLooks{maxAge: maxAge, looking: map[types.UID]bool{}, answers: map[types.UID]*guestAnswer{}}
}

// look records whether the machine uid is in its guest window.
func (g *guestLooks) look(uid types.UID, looking bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if looking {
		g.looking[uid] = true
	} else {
		delete(g.looking, uid)
	}
}

// lookOnly reports whether a reconcile of s's machine is one of its guest window's looks
// and nothing more: the machine is in its window and waits for its guest's address
// (waitsForAddress, on the status already read), with its VM known, running as wanted,
// without a task, a failure or a spec the last reconcile had not seen. Such a reconcile
// needs only to know whether the guest reports an address yet.
func (g *guestLooks) lookOnly(s *scope) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	looking := g.looking[s.machine.UID]
	g.mu.Unlock()
	st, m := s.before, s.machine
	return looking && !m.Deleting && m.Spec.ProviderID != "" && waitsForAddress(st) && !m.Task.InFlight() &&
		m.DesiredPower() == banlieuev1.PowerStatePoweredOn && st.FailureReason == "" && st.ObservedGeneration == m.Generation
}

// reports reports whether the guest of the VM id, of the Provider provider, reports an
// address, by an answer of reporter at most maxAge old.
func (g *guestLooks) reports(ctx context.Context, provider types.UID, reporter GuestAddressReporter, id string) (bool, error) {
	g.mu.Lock()
	a, ok := g.answers[provider]
	if !ok {
		a = &guestAnswer{}
		g.answers[provider] = a
	}
	g.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil || time.Since(a.at) >= g.maxAge {
		ids, err := reporter.GuestsWithAddresses(ctx)
		if err != nil {
			return false, err
		}
		a.ids, a.at = ids, time.Now()
	}
	return a.ids[id], nil
}
