package libvirtd

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Binaries the daemon and its networks need (DHCP is dnsmasq, isolation iptables);
// Require checks them.
var binaries = []string{"libvirtd", "qemu-system-x86_64", "qemu-img", "dnsmasq", "iptables"}

// DefaultStartTimeout bounds the wait for a started daemon to answer. The first start
// probes QEMU's capabilities, which takes a few seconds on a slow machine.
const DefaultStartTimeout = time.Minute

// Options configure a Daemon.
type Options struct {
	// Dir holds the daemon's configuration, socket, state and logs; a new temporary
	// directory, removed by Stop, when empty.
	Dir string
	// StartTimeout bounds the wait for the daemon to answer; DefaultStartTimeout when zero.
	StartTimeout time.Duration
	// TLS, when set, makes the daemon listen for qemu+tls clients on 127.0.0.1 (at
	// Daemon.TLSAddr) with this certificate, requiring client certificates signed by CA.
	TLS *TLS
}

// TLS are the PEM files of a daemon's TLS listener.
type TLS struct {
	// CA signs the server's and the clients' certificates.
	CA []byte
	// Cert and Key are the server's certificate (valid for 127.0.0.1) and key.
	Cert, Key []byte
}

// Daemon is a running libvirtd.
type Daemon struct {
	// Dir is the daemon's directory: etc, run, lib, cache and log are its private
	// /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt.
	Dir string
	// SocketPath is the path of the daemon's read-write socket.
	SocketPath string
	// TLSAddr is the host:port of the TLS listener, when Options.TLS is set.
	TLSAddr string

	removeDir    bool
	startTimeout time.Duration
	tls          *TLS

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// mounts maps the folders of Dir to the paths they replace in the daemon's namespace.
var mounts = [][2]string{
	{"etc", "/etc/libvirt"},
	{"run", "/run/libvirt"},
	{"lib", "/var/lib/libvirt"},
	{"cache", "/var/cache/libvirt"},
	{"log", "/var/log/libvirt"},
}

// qemuConf is the private qemu.conf; doc.go says why each line is there.
const qemuConf = `user = "root"
group = "root"
security_driver = "none"
namespaces = []
cgroup_controllers = []
stdio_handler = "file"
`

// Start starts a libvirtd as opts say and waits until it answers on its socket.
func Start(opts Options) (*Daemon, error) {
	if err := ensureQEMUUser(); err != nil {
		return nil, err
	}
	reapStale()
	d := &Daemon{Dir: opts.Dir, startTimeout: opts.StartTimeout, tls: opts.TLS}
	if d.startTimeout == 0 {
		d.startTimeout = DefaultStartTimeout
	}
	if d.Dir == "" {
		dir, err := os.MkdirTemp("", "libvirtd-")
		if err != nil {
			return nil, fmt.Errorf("failed to make the daemon's directory: %w", err)
		}
		d.Dir, d.removeDir = dir, true
	}
	d.SocketPath = filepath.Join(d.Dir, "sock", "libvirt-sock")
	for _, sub := range []string{"sock", "etc", "run", "lib", "cache", "log", "pools"} {
		if err := os.MkdirAll(filepath.Join(d.Dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("failed to make the daemon's directory: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.Dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("failed to write the owner file: %w", err)
	}
	if err := d.writeConfig(); err != nil {
		return nil, err
	}
	if err := d.start(); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// writeConfig writes libvirtd.conf and the private qemu.conf.
func (d *Daemon) writeConfig() error {
	conf := fmt.Sprintf("unix_sock_dir = %q\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"+
		"log_outputs = \"3:file:%s\"\n", filepath.Join(d.Dir, "sock"), filepath.Join(d.Dir, "libvirtd.log"))
	if d.tls != nil {
		tlsConf, err := d.writeTLS()
		if err != nil {
			return err
		}
		conf += tlsConf
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "libvirtd.conf"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("failed to write libvirtd.conf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "etc", "qemu.conf"), []byte(qemuConf), 0o600); err != nil {
		return fmt.Errorf("failed to write qemu.conf: %w", err)
	}
	return nil
}

// start runs libvirtd in a new mount namespace (Go makes its mounts private) through a
// shell that bind-mounts the daemon's folders first, and waits for it to answer.
func (d *Daemon) start() error {
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, m := range mounts {
		fmt.Fprintf(&script, "mkdir -p %s\nmount --bind %s %s\n", m[1], shellQuote(filepath.Join(d.Dir, m[0])), m[1])
	}
	listen := ""
	if d.tls != nil {
		listen = " --listen"
	}
	fmt.Fprintf(&script, "exec libvirtd%s -f %s -p %s\n", listen,
		shellQuote(filepath.Join(d.Dir, "libvirtd.conf")), shellQuote(filepath.Join(d.Dir, "libvirtd.pid")))
	out, err := os.OpenFile(filepath.Join(d.Dir, "libvirtd.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("failed to open the daemon's output file: %w", err)
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command("/bin/sh", "-c", script.String()) //nolint:gosec // the script starts the Debian libvirtd with paths this package wrote
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	_ = os.Remove(d.SocketPath)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start libvirtd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()

	deadline := time.Now().Add(d.startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("libvirtd exited at start: %s", d.logTail())
		default:
		}
		if l, err := d.Connect("qemu:///system"); err == nil {
			_ = l.Disconnect()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("libvirtd did not answer within %s: %s", d.startTimeout, d.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// URI returns the libvirt URI of driver (e.g. "qemu:///system" or "test:///default")
// through the daemon's socket, as a Provider's endpoint names it.
func (d *Daemon) URI(driver string) string {
	u, err := url.Parse(driver)
	if err != nil {
		return driver
	}
	u.Scheme = strings.SplitN(u.Scheme, "+", 2)[0] + "+unix"
	q := u.Query()
	q.Set("socket", d.SocketPath)
	u.RawQuery = q.Encode()
	return u.String()
}

// QEMUURI returns the URI of the daemon's QEMU driver in system mode.
func (d *Daemon) QEMUURI() string { return d.URI("qemu:///system") }

// Virsh runs virsh on the daemon's QEMU driver, a client banlieue did not write: the
// tests' witness of what a domain is. It returns virsh's output, trimmed.
func (d *Daemon) Virsh(args ...string) (string, error) {
	path, err := exec.LookPath("virsh")
	if err != nil {
		return "", errors.New("virsh is not installed; hack/deps.sh installs it")
	}
	out, err := exec.Command(path, append([]string{"-c", d.QEMUURI()}, args...)...).CombinedOutput() //nolint:gosec // virsh, with the caller's (a test's) arguments
	if err != nil {
		return "", fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// TestURI returns the URI of the daemon's test driver, whose state is per connection.
func (d *Daemon) TestURI() string { return d.URI("test:///default") }

// Connect opens a client connection to driver (e.g. "qemu:///system") through the
// daemon's socket, for tests to arrange and inspect. The caller disconnects it.
func (d *Daemon) Connect(driver string) (*libvirt.Libvirt, error) {
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.SocketPath), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI(driver)); err != nil {
		return nil, err
	}
	return l, nil
}

// Restart stops the daemon and starts it again on the same socket and state, as an
// outage a provider must ride out. Running domains keep running: libvirtd finds them
// again when it starts.
func (d *Daemon) Restart() error {
	d.kill()
	return d.start()
}

// Kill stops the daemon, leaving its domains running and its state in place, so a test
// can look at a provider facing an unreachable host; Restart brings it back.
func (d *Daemon) Kill() { d.kill() }

// kill stops libvirtd with SIGTERM, then SIGKILL after five seconds.
func (d *Daemon) kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Stop destroys the daemon's domains and networks, stops it, kills any QEMU or dnsmasq
// it left behind, and removes the directory Start made.
func (d *Daemon) Stop() {
	if l, err := d.Connect("qemu:///system"); err == nil {
		if doms, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive); err == nil {
			for _, dom := range doms {
				_ = l.DomainDestroy(dom)
			}
		}
		if nets, _, err := l.ConnectListAllNetworks(1, libvirt.ConnectListNetworksActive); err == nil {
			for _, n := range nets {
				_ = l.NetworkDestroy(n)
			}
		}
		_ = l.Disconnect()
	}
	d.kill()
	// QEMU and dnsmasq daemonize, so they are not in libvirtd's process group; their
	// pid files are in the private /run/libvirt.
	for _, glob := range []string{"run/qemu/*.pid", "run/network/*.pid", "lib/dnsmasq/*.pid"} {
		files, _ := filepath.Glob(filepath.Join(d.Dir, glob))
		for _, f := range files {
			data, err := os.ReadFile(f) //nolint:gosec // a pid file in the daemon's own directory
			if err != nil {
				continue
			}
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if d.removeDir {
		_ = os.RemoveAll(d.Dir)
	}
}

// logTail returns the end of the daemon's output, for an error message.
func (d *Daemon) logTail() string {
	data, _ := os.ReadFile(filepath.Join(d.Dir, "libvirtd.out"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// ensureQEMUUser creates the user and groups libvirtd's QEMU driver resolves at start.
func ensureQEMUUser() error {
	for _, g := range []string{"kvm", "libvirt-qemu"} {
		if _, err := user.LookupGroup(g); err != nil {
			if out, err := exec.Command("groupadd", "--system", g).CombinedOutput(); err != nil { //nolint:gosec // g is one of the two fixed group names above
				return fmt.Errorf("failed to create group %s: %w: %s", g, err, out)
			}
		}
	}
	if _, err := user.Lookup("libvirt-qemu"); err != nil {
		out, err := exec.Command("useradd", "--system", "--gid", "kvm", "--home-dir", "/var/lib/libvirt",
			"--no-create-home", "--shell", "/usr/sbin/nologin", "libvirt-qemu").CombinedOutput()
		if err != nil {
			return fmt.Errorf("failed to create user libvirt-qemu: %w: %s", err, out)
		}
	}
	return nil
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
