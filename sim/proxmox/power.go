package proxmoxsim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Task types of the power actions, as PVE names them.
var powerTasks = map[string]string{
	"start": "qmstart", "stop": "qmstop", "shutdown": "qmshutdown", "reboot": "qmreboot",
	"reset": "qmreset", "suspend": "qmpause", "resume": "qmresume",
}

// powerAction returns the handler of POST status/<action>. Preconditions PVE checks
// before forking fail the request; the ones its worker checks (locks, templates, an
// already running VM, missing bridges and snippets) fail the task.
func (s *Simulator) powerAction(action string) handler {
	return func(c *call) (any, error) {
		v, err := s.vmOf(c)
		if err != nil {
			return nil, err
		}
		typ := powerTasks[action]
		switch action {
		case "suspend":
			if !v.running {
				return nil, failf("VM %d not running", v.vmid)
			}
			if c.params["todisk"] == "1" {
				typ = "qmsuspend"
			}
		case "resume", "reset":
			if !v.running {
				return nil, failf("VM %d not running", v.vmid)
			}
		case "reboot":
			if v.paused {
				return nil, failf("VM is paused - cannot shutdown")
			}
			if !v.running {
				return nil, failf("VM %d not running", v.vmid)
			}
		case "shutdown":
			if v.paused && c.params["forceStop"] != "1" {
				return nil, failf("VM is paused - cannot shutdown")
			}
		case "start":
			if err := s.checkQuorum(); err != nil {
				return nil, err
			}
		}
		// The worker holds the config lock while it runs: vm_stop holds it for the
		// whole shutdown, so a config change waits for it.
		return s.fork(c, typ, fmt.Sprint(v.vmid), worker{locks: s.configLock(v.vmid), finish: func(fail error) error {
			if fail != nil {
				return fail
			}
			if s.vms[v.vmid] != v {
				return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid)
			}
			return s.power(c, v, action, typ)
		}}), nil
	}
}

// power carries out a power action in its task.
func (s *Simulator) power(c *call, v *vm, action, typ string) error {
	if action == "start" && v.conf["lock"] == "suspended" {
		// Resuming from hibernation is a start that the suspended lock allows.
		delete(v.conf, "lock")
		s.powerOn(v)
		return nil
	}
	if err := v.checkLock(c); err != nil {
		return err
	}
	switch action {
	case "start":
		if v.running {
			return failf("VM %d already running", v.vmid)
		}
		if v.conf["template"] == "1" {
			return failf("you can't start a vm if it's a template")
		}
		// vm_start applies the pending changes before it builds QEMU's command line.
		s.applyPendingNow(v)
		if err := s.checkStartable(v); err != nil {
			return err
		}
		s.powerOn(v)
	case "stop", "shutdown":
		// vm_stop_cleanup applies the pending changes once QEMU is gone.
		v.running, v.paused = false, false
		s.applyPendingNow(v)
	case "reboot":
		// A reboot is a shutdown and a start: the pending changes apply.
		s.applyPendingNow(v)
		s.powerOn(v)
	case "reset":
		// A reset restarts the guest without a power cycle: nothing pending applies.
		s.powerOn(v)
	case "suspend":
		if typ == "qmsuspend" {
			v.running, v.paused = false, false
			v.conf["lock"] = "suspended"
			return nil
		}
		v.paused = true
	case "resume":
		v.paused = false
	}
	return nil
}

// powerOn starts (or restarts) a guest: a new QEMU process, and a guest agent that
// answers GuestAgentDelay later.
func (s *Simulator) powerOn(v *vm) {
	s.pid++
	v.running, v.paused, v.started, v.pid = true, false, time.Now(), s.pid
}

// checkStartable finds what makes qemu-server's vm_start fail before QEMU runs:
// CPUs, vcpus or memory it cannot give the VM (checkStartHardware), a NIC on a bridge
// the node lacks, a cicustom snippet that is not there.
func (s *Simulator) checkStartable(v *vm) error {
	if err := checkStartHardware(v.conf); err != nil {
		return err
	}
	n := s.node(v.node)
	for k, val := range v.conf {
		if !strings.HasPrefix(k, "net") || !netPattern.MatchString(k) {
			continue
		}
		if b := netBridge(val); b != "" && !slices.Contains(n.bridges, b) {
			return failf("bridge '%s' does not exist", b)
		}
	}
	if custom := v.conf["cicustom"]; custom != "" {
		for _, part := range strings.Split(custom, ",") {
			_, volid, _ := strings.Cut(part, "=")
			st, vol := s.findVolume(v.node, volid)
			if vol == nil {
				path := volid
				if st != nil {
					_, name, _ := strings.Cut(volid, ":")
					path = st.path() + "/" + name
				}
				return failf("unable to open file '%s' - No such file or directory", path)
			}
		}
	}
	return nil
}
