package guestagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// consoleTailBytes bounds what a console reader keeps: the end of a boot is what says
// where it stopped.
const consoleTailBytes = 16 << 10

// console copies what the guest writes on its serial console (the domain's pty, which
// banlieue's domains have and no one else reads in tests) while a wait runs, so that a
// guest that does not come up says where its boot stopped: in GRUB, the kernel, or
// systemd.
type console struct {
	mu   sync.Mutex
	tail []byte
	pty  string
	f    *os.File
	err  error
	// done is set by stop; a pty opened after it is closed at once.
	done bool
}

// watchConsole starts reading the domain's console once libvirt names its pty; stop ends
// it.
func (a *Agent) watchConsole() *console {
	c := &console{}
	go func() {
		for range 60 {
			c.mu.Lock()
			done := c.done
			c.mu.Unlock()
			if done {
				return
			}
			out, err := exec.Command(a.virsh, "-c", a.uri, "ttyconsole", a.domain).Output() //nolint:gosec // virsh, the witness
			if pty := strings.TrimSpace(string(out)); err == nil && strings.HasPrefix(pty, "/dev/pts/") {
				c.read(pty)
				return
			}
			time.Sleep(time.Second)
		}
	}()
	return c
}

// read copies the pty into the tail until it is closed.
func (c *console) read(pty string) {
	f, err := os.OpenFile(pty, os.O_RDONLY|syscall.O_NOCTTY, 0) //nolint:gosec // the domain's console pty, as libvirt names it
	c.mu.Lock()
	if c.done && err == nil {
		_ = f.Close()
	}
	c.pty, c.f, c.err = pty, f, err
	done := c.done
	c.mu.Unlock()
	if err != nil || done {
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		c.mu.Lock()
		c.tail = append(c.tail, buf[:n]...)
		if len(c.tail) > consoleTailBytes {
			c.tail = c.tail[len(c.tail)-consoleTailBytes:]
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// stop ends the reading and returns the last lines the guest wrote, for a failure's
// message.
func (c *console) stop() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if c.f != nil {
		_ = c.f.Close()
	}
	switch {
	case c.err != nil:
		return "its console could not be read: " + c.err.Error()
	case c.pty == "":
		return "libvirt named no console pty for it"
	}
	lines := strings.Split(strings.ReplaceAll(string(c.tail), "\r", ""), "\n")
	return "the end of its console (" + c.pty + "):\n" + strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// qemuLogTail is the end of the domain's QEMU log in the daemon's private log folder.
func (a *Agent) qemuLogTail() string {
	b, err := os.ReadFile(filepath.Join(a.logDir, a.domain+".log"))
	if err != nil {
		return "no QEMU log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return "the end of its QEMU log:\n" + strings.Join(lines[max(0, len(lines)-10):], "\n")
}
