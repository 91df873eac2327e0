package faults

import (
	"testing"
	"time"
)

// Bounds of a kill round's random times.
const (
	// maxKillDelay is the longest wait before a round's kill.
	maxKillDelay = 4 * time.Second
	// maxDowntime is the longest a killed process stays down.
	maxDowntime = 3 * time.Second
)

// killRounds runs n kill rounds, one after the other: wait a random moment, SIGKILL a
// random banlieue process (the core controller or a provider), wait a random short
// while, start it again. The choices come from the rig's seeded source, so a seed
// replays the same rounds; what each process was doing at the kill depends on timing.
func (r *rig) killRounds(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		delay := time.Duration(r.rng.Int64N(int64(maxKillDelay)))
		p := r.procs[r.rng.IntN(len(r.procs))]
		down := time.Duration(r.rng.Int64N(int64(maxDowntime)))
		time.Sleep(delay)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(down)
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		t.Logf("kill round %d: after %s, SIGKILL %s, restarted %s later", i+1, delay.Round(time.Millisecond), p.Name, down.Round(time.Millisecond))
	}
}

// requireRunning fails the test if a banlieue process has exited on its own: no fault
// but a kill may end one.
func (r *rig) requireRunning(t *testing.T) {
	t.Helper()
	for _, p := range r.procs {
		if !p.Running() {
			t.Errorf("%s exited by itself; see its log in %s", p.Name, r.logDir)
		}
	}
}
