package host

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// TestPausedInTransit separates the pauses libvirt ends by itself from the ones that
// stay until someone acts: a guest crash or an I/O error is never waited for.
func TestPausedInTransit(t *testing.T) {
	for _, tc := range []struct {
		reason libvirt.DomainPausedReason
		want   bool
	}{
		{libvirt.DomainPausedStartingUp, true},
		{libvirt.DomainPausedMigration, true},
		{libvirt.DomainPausedSave, true},
		{libvirt.DomainPausedDump, true},
		{libvirt.DomainPausedSnapshot, true},
		{libvirt.DomainPausedShuttingDown, true},
		{libvirt.DomainPausedPostcopy, true},
		{libvirt.DomainPausedUnknown, false},
		{libvirt.DomainPausedUser, false},
		{libvirt.DomainPausedIoerror, false},
		{libvirt.DomainPausedWatchdog, false},
		{libvirt.DomainPausedCrashed, false},
		{libvirt.DomainPausedPostcopyFailed, false},
		{libvirt.DomainPausedAPIError, false},
		{libvirt.DomainPausedFromSnapshot, false},
	} {
		if got := pausedInTransit(tc.reason); got != tc.want {
			t.Errorf("pausedInTransit(%d) = %v, want %v", tc.reason, got, tc.want)
		}
	}
}
