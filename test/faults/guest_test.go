package faults

import (
	"testing"
	"time"

	"github.com/banlieue/banlieue/test/guestagent"
)

// guestVM is the fleet's VM that runs on libvirt: with the guest image (make test builds
// it), a real Debian guest that lives through the suite's libvirt rounds.
const guestVM = "vm-000"

// guestBooted waits for the real guest of guestVM to boot, after a creation during
// which the processes were killed, and records its boot ID.
func (r *rig) guestBooted(t *testing.T) {
	if r.backends.Libvirt == nil {
		t.Skip("no libvirt here")
	}
	guestagent.Image(t)
	ga := guestagent.New(t, r.backends.Libvirt, namespace+"."+guestVM)
	start := time.Now()
	ga.WaitUp(5 * time.Minute)
	r.guestBootID = ga.BootID()
	r.record("a real guest boots", "the guest agent of "+guestVM+" answers, after its creation under kills", time.Since(start), inventoryCounts{})
}

// guestSurvived checks that the real guest still runs the boot guestBooted saw: libvirtd
// stopped with it running and started again, the providers and kube-apiserver killed,
// never rebooted or replaced it.
func (r *rig) guestSurvived(t *testing.T) {
	if r.guestBootID == "" {
		t.Skip("no real guest in this run")
	}
	ga := guestagent.New(t, r.backends.Libvirt, namespace+"."+guestVM)
	ga.WaitUp(time.Minute)
	if got := ga.BootID(); got != r.guestBootID {
		t.Fatalf("the guest of %s booted again: boot ID %s, was %s", guestVM, got, r.guestBootID)
	}
	r.record("the real guest lives on", "same boot ID after libvirtd's outage, the kills and kube-apiserver's restart", 0, inventoryCounts{})
}
