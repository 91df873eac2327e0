package libvirtd

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/banlieue/banlieue/internal/hostdeps"
)

// Unavailable says why a daemon cannot run here, or "" when it can: it needs root and
// libvirtd, QEMU, qemu-img, dnsmasq and iptables, which hack/deps.sh installs.
func Unavailable() string {
	var missing []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	switch {
	case len(missing) > 0:
		return "libvirtd needs " + strings.Join(missing, ", ") + " (run hack/deps.sh as root)"
	case os.Geteuid() != 0:
		return "a private system libvirtd needs root"
	}
	return ""
}

// Require skips tb (or fails it, when the environment variable CI is "true") unless a
// daemon can run here (see Unavailable).
func Require(tb testing.TB) {
	tb.Helper()
	hostdeps.Require(tb, Unavailable())
}

// StartT starts a daemon for tb after Require, and stops it when tb ends.
func StartT(tb testing.TB, opts Options) *Daemon {
	tb.Helper()
	Require(tb)
	d, err := Start(opts)
	if err != nil {
		tb.Fatalf("failed to start libvirtd: %v", err)
	}
	tb.Cleanup(d.Stop)
	return d
}
