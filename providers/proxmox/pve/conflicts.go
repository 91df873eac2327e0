package pve

import "strings"

// Conflicts with other users of the cluster, told apart by PVE's own words.

// IsLockTimeout reports whether PVE gave up waiting for a VM's config lock, which
// another task held for longer than the wait ("can't lock file
// '/var/lock/qemu-server/lock-101.conf' - got timeout"): 10 seconds for a config
// change, one for each lock of a clone's worker.
func IsLockTimeout(msg string) bool {
	return strings.Contains(msg, "can't lock file '/var/lock/qemu-server/lock-") && strings.Contains(msg, "got timeout")
}

// IsLocked reports whether PVE refused a change because the VM's config carries a
// lock (clone, backup, migrate, …): "VM is locked (backup)".
func IsLocked(msg string) bool { return strings.Contains(msg, "VM is locked (") }

// IsNoQuorum reports whether PVE refused a change because the cluster has no quorum:
// check_cfs_quorum's "cluster not ready - no quorum?", or a config write under
// /etc/pve, which pmxcfs makes read-only without quorum, denied.
func IsNoQuorum(msg string) bool {
	return strings.Contains(msg, "no quorum") || (strings.Contains(msg, "'/etc/pve/") && strings.Contains(msg, "Permission denied"))
}

// LostVMIDRace reports whether a clone or create task failed because another
// request took its VMID between PVE's check before the worker started and the
// worker's own: the worker could not lock the new VMID while the other's ran, or
// found its config there. No VM of the task's was left.
func LostVMIDRace(exitStatus string) bool {
	return strings.HasPrefix(exitStatus, "can't lock file '/var/lock/qemu-server/lock-") ||
		(strings.HasPrefix(exitStatus, "unable to create VM ") && strings.Contains(exitStatus, "already exists"))
}

// IsConfigChanged reports whether PVE refused a config change made against a digest
// that is no longer the config's: someone changed it since it was read ("checksum
// mismatch (file change by other user?)").
func IsConfigChanged(msg string) bool { return strings.Contains(msg, "checksum mismatch") }
