package libvirtd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile holds the process ID of the test process that started a daemon.
const ownerFile = "owner.pid"

// reapStale cleans up after test processes that died without stopping their daemon
// (a test binary killed by its timeout, say): their QEMUs, dnsmasqs, bridges and
// firewall rules would outlive them, and a network left behind holds its subnet, so
// the next run could not start its own. A daemon directory whose owner is gone is
// claimed by renaming it (so two reapers never share one), then a daemon is started on
// it, which adopts the running networks and domains, and stopped, which destroys them
// the way libvirt cleans up.
func reapStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "libvirtd-*"))
	for _, dir := range dirs {
		if strings.HasSuffix(dir, "-reaping") || ownerAlive(dir) {
			continue
		}
		claimed := dir + "-reaping"
		if err := os.Rename(dir, claimed); err != nil {
			continue
		}
		d := &Daemon{Dir: claimed, SocketPath: filepath.Join(claimed, "sock", "libvirt-sock"), removeDir: true, startTimeout: DefaultStartTimeout}
		// The configuration names the old paths: write it again for the new one.
		if err := d.writeConfig(); err == nil {
			_ = d.start()
		}
		d.Stop()
	}
}

// ownerAlive reports whether the process that started the daemon in dir still runs.
// A directory without an owner file is being set up, and counts as alive.
func ownerAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, ownerFile)) //nolint:gosec // the owner file of a simulator directory this package made
	if err != nil {
		return true
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}
