// Package guestagent is the tests' witness of a real guest: the QEMU guest agent inside
// it and libvirt's own view of it, both reached through virsh, a client banlieue did not
// write. It also finds the guest image hack/guest-image.sh builds, and says which
// acceleration a real guest can run with on this host.
package guestagent

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/banlieue/banlieue/sim/libvirtd"
)

// ImageEnv names the qcow2 hack/guest-image.sh builds; make test sets it.
const ImageEnv = "BANLIEUE_GUEST_IMAGE"

// Image is the path of the real guest image, from BANLIEUE_GUEST_IMAGE. Without
// it the test fails in CI and is skipped elsewhere, saying how to build the image.
func Image(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv(ImageEnv)
	if p == "" {
		msg := ImageEnv + " is not set; run the tests through 'make test', or set it to the path 'bash hack/guest-image.sh | tail -n 1' prints"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	if _, err := os.Stat(p); err != nil { //nolint:gosec // the image path the test runner names
		tb.Fatalf("%s: %v", ImageEnv, err)
	}
	return p
}

// Accel is the domain type a test must name for a real guest to run, with the reason;
// "" leaves the choice to the libvirt provider, which takes KVM when libvirt offers it
// and falls back to TCG when QEMU cannot use it. BANLIEUE_GUEST_ACCEL (kvm or qemu)
// forces one. A KVM of the PVM kind (a paravirtual KVM for nested hosts: the module
// kvm_pvm, with a /dev/kvm) starts QEMU but cannot run a stock kernel, so libvirt offers
// it, QEMU runs, and the guest hangs in its boot loader: only TCG works there, and
// nothing a provider can see says so.
func Accel() (domainType, why string) {
	switch a := os.Getenv("BANLIEUE_GUEST_ACCEL"); a {
	case "kvm", "qemu":
		return a, "forced by BANLIEUE_GUEST_ACCEL=" + a
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		if _, err := os.Stat("/dev/kvm"); err == nil {
			return "qemu", "forced: this host's /dev/kvm is kvm_pvm's, which cannot run a stock guest kernel"
		}
	}
	return "", "the provider's choice"
}

// Agent is the QEMU guest agent of a domain, reached with virsh's qemu-agent-command:
// the guest's own account of itself, through neither banlieue nor its libvirt client.
type Agent struct {
	t      testing.TB
	virsh  string
	uri    string
	domain string
	// logDir is where the daemon's QEMU driver logs each domain.
	logDir string
}

// New is the agent of domain on the daemon; it fails the test without virsh (make test
// installs it).
func New(tb testing.TB, d *libvirtd.Daemon, domain string) *Agent {
	tb.Helper()
	virsh, err := exec.LookPath("virsh")
	if err != nil {
		tb.Fatal("virsh is not installed; make test installs it (hack/deps.sh)")
	}
	return &Agent{t: tb, virsh: virsh, uri: d.QEMUURI(), domain: domain, logDir: filepath.Join(d.Dir, "log", "qemu")}
}

// Try runs one agent command and decodes its "return" into out.
func (a *Agent) Try(command string, args any, out any) error {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	body, _ := json.Marshal(req)
	res, err := exec.Command(a.virsh, "-c", a.uri, "qemu-agent-command", "--timeout", "10", a.domain, string(body)).CombinedOutput() //nolint:gosec // virsh, the witness, with the test's own arguments
	if err != nil {
		return &agentError{command: command, out: strings.TrimSpace(string(res)), err: err}
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(res, &reply); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(reply.Return, out)
}

// agentError is a failed agent command, with what virsh said.
type agentError struct {
	command, out string
	err          error
}

func (e *agentError) Error() string {
	return "virsh qemu-agent-command " + e.command + ": " + e.err.Error() + ": " + e.out
}

// Do runs one agent command and fails the test when it fails.
func (a *Agent) Do(command string, args any, out any) {
	a.t.Helper()
	if err := a.Try(command, args, out); err != nil {
		a.t.Fatal(err)
	}
}

// WaitUp waits until the agent answers guest-ping, which it does once the guest has
// booted far enough to start it.
func (a *Agent) WaitUp(timeout time.Duration) {
	a.t.Helper()
	console := a.watchConsole()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = a.Try("guest-ping", nil, nil); err == nil {
			console.stop()
			return
		}
		time.Sleep(time.Second)
	}
	state, _ := exec.Command(a.virsh, "-c", a.uri, "domstate", a.domain, "--reason").CombinedOutput() //nolint:gosec // virsh, the witness
	a.t.Fatalf("the guest agent of %s did not answer within %s: %v\nthe domain is %s\n%s\n%s",
		a.domain, timeout, err, strings.TrimSpace(string(state)), a.qemuLogTail(), console.stop())
}

// Hostname is the guest's host name (guest-get-host-name).
func (a *Agent) Hostname() string {
	a.t.Helper()
	var r struct {
		HostName string `json:"host-name"`
	}
	a.Do("guest-get-host-name", nil, &r)
	return r.HostName
}

// ReadFile reads a file of the guest, failing the test when it cannot.
func (a *Agent) ReadFile(path string) string {
	a.t.Helper()
	data, err := a.TryReadFile(path)
	if err != nil {
		a.t.Fatal(err)
	}
	return data
}

// TryReadFile reads a file of the guest (guest-file-open, -read, -close); up to 1 MiB.
func (a *Agent) TryReadFile(path string) (string, error) {
	var handle int
	if err := a.Try("guest-file-open", map[string]any{"path": path, "mode": "r"}, &handle); err != nil {
		return "", err
	}
	defer func() { _ = a.Try("guest-file-close", map[string]any{"handle": handle}, nil) }()
	var r struct {
		BufB64 string `json:"buf-b64"`
	}
	if err := a.Try("guest-file-read", map[string]any{"handle": handle, "count": 1 << 20}, &r); err != nil {
		return "", err
	}
	data, err := base64.StdEncoding.DecodeString(r.BufB64)
	return string(data), err
}

// Exec runs a program in the guest (guest-exec) and returns its standard output once
// it exited; a non-zero exit fails the test.
func (a *Agent) Exec(path string, args ...string) string {
	a.t.Helper()
	var started struct {
		PID int `json:"pid"`
	}
	if args == nil {
		args = []string{} // the agent wants an array, never null
	}
	a.Do("guest-exec", map[string]any{"path": path, "arg": args, "capture-output": true}, &started)
	for range 300 {
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			OutData  string `json:"out-data"`
			ErrData  string `json:"err-data"`
		}
		a.Do("guest-exec-status", map[string]any{"pid": started.PID}, &st)
		if st.Exited {
			out, _ := base64.StdEncoding.DecodeString(st.OutData)
			if st.ExitCode != 0 {
				errOut, _ := base64.StdEncoding.DecodeString(st.ErrData)
				a.t.Fatalf("%s %v in the guest exited %d: %s", path, args, st.ExitCode, errOut)
			}
			return string(out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.t.Fatalf("%s %v in the guest did not exit within 30 s", path, args)
	return ""
}

// Addresses are the IPv4 addresses of the guest's NICs by MAC
// (guest-network-get-interfaces), loopback left out.
func (a *Agent) Addresses() map[string][]string {
	a.t.Helper()
	var ifaces []struct {
		MAC string `json:"hardware-address"`
		IPs []struct {
			Type    string `json:"ip-address-type"`
			Address string `json:"ip-address"`
			Prefix  int    `json:"prefix"`
		} `json:"ip-addresses"`
	}
	a.Do("guest-network-get-interfaces", nil, &ifaces)
	out := map[string][]string{}
	for _, i := range ifaces {
		for _, ip := range i.IPs {
			if ip.Type == "ipv4" && !strings.HasPrefix(ip.Address, "127.") {
				out[strings.ToLower(i.MAC)] = append(out[strings.ToLower(i.MAC)], ip.Address)
			}
		}
	}
	return out
}

// Virsh runs virsh against the daemon's QEMU driver and returns what it printed; it
// fails the test when virsh is missing (make test installs it) or fails.
func Virsh(tb testing.TB, d *libvirtd.Daemon, args ...string) string {
	tb.Helper()
	virsh, err := exec.LookPath("virsh")
	if err != nil {
		tb.Fatal("virsh is not installed; make test installs it (hack/deps.sh)")
	}
	out, err := exec.Command(virsh, append([]string{"-c", d.QEMUURI()}, args...)...).CombinedOutput() //nolint:gosec // virsh, the witness, with the test's own arguments
	if err != nil {
		tb.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Leases are the DHCP leases of a libvirt network as virsh lists them: MAC → IPv4
// address (without prefix).
func Leases(tb testing.TB, d *libvirtd.Daemon, network string) map[string]string {
	tb.Helper()
	leases := map[string]string{}
	for _, line := range strings.Split(Virsh(tb, d, "net-dhcp-leases", network), "\n") {
		f := strings.Fields(line)
		// Expiry date, expiry time, MAC, protocol, address/prefix, host name, client ID.
		if len(f) >= 5 && f[3] == "ipv4" {
			addr, _, _ := strings.Cut(f[4], "/")
			leases[strings.ToLower(f[2])] = addr
		}
	}
	return leases
}

// DomainState is the domain's state and its reason, as virsh domstate --reason says
// them (e.g. "shut off (shutdown)").
func DomainState(tb testing.TB, d *libvirtd.Daemon, domain string) string {
	tb.Helper()
	return strings.TrimSpace(Virsh(tb, d, "domstate", domain, "--reason"))
}

// DomInfo is what virsh dominfo says of the domain (CPU(s), Max memory, …).
func DomInfo(tb testing.TB, d *libvirtd.Daemon, domain string) string {
	tb.Helper()
	return Virsh(tb, d, "dominfo", domain)
}

// domainTypeAttr is the type attribute of a domain's XML.
var domainTypeAttr = regexp.MustCompile(`<domain type='(\w+)'`)

// DomainType is the hypervisor the domain runs on as libvirt defines it: kvm or qemu
// (TCG).
func DomainType(tb testing.TB, d *libvirtd.Daemon, domain string) string {
	tb.Helper()
	m := domainTypeAttr.FindStringSubmatch(Virsh(tb, d, "dumpxml", domain))
	if m == nil {
		tb.Fatalf("virsh dumpxml %s names no domain type", domain)
	}
	return m[1]
}

// Volumes lists a pool's volumes as virsh lists them, after a refresh of the pool.
func Volumes(tb testing.TB, d *libvirtd.Daemon, pool string) []string {
	tb.Helper()
	Virsh(tb, d, "pool-refresh", pool)
	var names []string
	for _, line := range strings.Split(Virsh(tb, d, "vol-list", pool), "\n")[2:] {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// BootID is the guest's boot ID (/proc/sys/kernel/random/boot_id): another one means
// the guest booted again.
func (a *Agent) BootID() string {
	a.t.Helper()
	return strings.TrimSpace(a.ReadFile("/proc/sys/kernel/random/boot_id"))
}
