package libvirtd

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Require skips tb (or fails it, when the environment variable CI is "true") unless a
// daemon can run here: as root, with libvirtd, QEMU, qemu-img, dnsmasq and iptables
// installed. Install them with hack/deps.sh.
func Require(tb testing.TB) {
	tb.Helper()
	var missing []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	var why string
	switch {
	case len(missing) > 0:
		why = "libvirtd tests need " + strings.Join(missing, ", ") + " (run hack/deps.sh as root)"
	case os.Geteuid() != 0:
		why = "libvirtd tests run a system libvirtd and need root"
	default:
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
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
