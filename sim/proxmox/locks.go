package proxmoxsim

import (
	"time"
)

// Lock timeouts of qemu-server.
const (
	// DefaultLockTimeout is how long PVE's lock_config waits for a VM's config lock
	// (config updates, resize, power actions, destroy) when Options.LockTimeout is 0.
	DefaultLockTimeout = 10 * time.Second
	// cloneLockTimeout is how long a qmclone worker waits for the source's and the new
	// VMID's locks: clone_vm's lock_config_full(…, 1, …).
	cloneLockTimeout = time.Second
)

// flock is a VMID's lock file, /var/lock/qemu-server/lock-<vmid>.conf, which PVE's
// workers and API calls flock around every change of the VM's config: shared (a clone
// of a stopped source) or exclusive (everything else). It exists apart from the
// config, so a VMID that no VM has yet (a clone's newid) has one too.
type flock struct {
	readers int
	writer  bool
}

// lockSpec is one lock a worker takes before it runs.
type lockSpec struct {
	vmid    int
	shared  bool
	timeout time.Duration
}

// lockTimeout is PVE's lock_file_full failure.
func lockTimeout(vmid int) error {
	return failf("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", vmid)
}

// configLockTimeout is lock_config's timeout, Options.LockTimeout.
func (s *Simulator) configLockTimeout() time.Duration {
	switch t := s.opts.LockTimeout; {
	case t == 0:
		return DefaultLockTimeout
	case t < 0:
		return 0
	default:
		return t
	}
}

// cloneTimeout is a clone worker's lock timeout: qemu-server's second, or
// LockTimeout when that is shorter.
func (s *Simulator) cloneTimeout() time.Duration { return min(cloneLockTimeout, s.configLockTimeout()) }

// tryLock takes a VMID's lock if it is free for the mode, at once.
func (s *Simulator) tryLock(vmid int, shared bool) bool {
	f := s.flocks[vmid]
	if f == nil {
		f = &flock{}
		s.flocks[vmid] = f
	}
	switch {
	case f.writer, !shared && f.readers > 0:
		return false
	case shared:
		f.readers++
	default:
		f.writer = true
	}
	return true
}

// unlock releases a lock tryLock took and wakes those waiting for one.
func (s *Simulator) unlock(vmid int, shared bool) {
	f := s.flocks[vmid]
	if f == nil {
		return
	}
	if shared {
		f.readers--
	} else {
		f.writer = false
	}
	if f.readers == 0 && !f.writer {
		delete(s.flocks, vmid)
	}
	close(s.unlocked)
	s.unlocked = make(chan struct{})
}

// lockWait takes a VMID's lock, waiting up to timeout while someone else holds it, as
// flock does; it fails as lock_file_full does. It runs with s.mu held and lets go of
// it while it waits, so the caller must look again at what it read before.
func (s *Simulator) lockWait(vmid int, shared bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !s.tryLock(vmid, shared) {
		left := time.Until(deadline)
		if left <= 0 {
			return lockTimeout(vmid)
		}
		woken := s.unlocked
		s.mu.Unlock()
		timer := time.NewTimer(left)
		select {
		case <-woken:
		case <-timer.C:
		case <-s.ctx.Done():
		}
		timer.Stop()
		s.mu.Lock()
		if s.ctx.Err() != nil {
			return errStopped
		}
	}
	return nil
}

// tryLocks takes every lock at once or none.
func (s *Simulator) tryLocks(locks []lockSpec) bool {
	for i, l := range locks {
		if !s.tryLock(l.vmid, l.shared) {
			s.unlockAll(locks[:i])
			return false
		}
	}
	return true
}

// waitLocks takes the locks in order, each waiting up to its timeout; on failure it
// releases those it took.
func (s *Simulator) waitLocks(t *task, locks []lockSpec) error {
	for i, l := range locks {
		if s.tryLock(l.vmid, l.shared) {
			continue
		}
		t.logf("trying to acquire lock...")
		if err := s.lockWait(l.vmid, l.shared, l.timeout); err != nil {
			t.logf(" failed")
			s.unlockAll(locks[:i])
			return err
		}
		t.logf(" OK")
	}
	return nil
}

func (s *Simulator) unlockAll(locks []lockSpec) {
	for _, l := range locks {
		s.unlock(l.vmid, l.shared)
	}
}

// configLock is the lock_config lock of one VM, for a worker.
func (s *Simulator) configLock(vmid int) []lockSpec {
	return []lockSpec{{vmid: vmid, timeout: s.configLockTimeout()}}
}

// closedChan is a channel that is closed: nothing to wait for.
func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}
