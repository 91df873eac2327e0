// Package harness runs banlieue's binary as real processes for the scale and fault
// suites: built once, each process with its own kubeconfig, metrics port and log file,
// killed with SIGKILL and started again, with its CPU time and peak memory read from the
// kernel. In-process managers cannot be killed mid-write or measured apart, so these
// suites need processes.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/banlieue/banlieue/test/testenv"
)

// RaceProcessesEnv names the environment variable that, set to 1, makes Build build
// for the race detector in a test that does not run under it: for a suite whose own
// binary cannot (make test's fault suite, whose vCenter simulator races in govmomi).
const RaceProcessesEnv = "BANLIEUE_RACE_PROCESSES"

// Build compiles cmd/banlieue into dir and returns the binary's path. A test that runs
// under the race detector gets a binary built for it too (or with RaceProcessesEnv), so
// that the processes it runs are checked as the code in the test binary is (see
// StartForTest).
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "banlieue")
	args := []string{"build", "-o", bin}
	if raceEnabled || os.Getenv(RaceProcessesEnv) == "1" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/banlieue")...) //nolint:gosec // builds this repository's own command
	cmd.Dir = testenv.RepoPath(".")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("failed to build banlieue: %w\n%s", err, out)
	}
	return bin, nil
}

// Usage is what the kernel counted for a process over all its incarnations.
type Usage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// PeakRSS is the largest resident set of any incarnation, in bytes.
	PeakRSS uint64
}

// Process is one banlieue process (`banlieue controller`, `banlieue provider vsphere`,
// ...) that can be killed and started again with the same arguments.
type Process struct {
	// Name names the process in errors and its log file.
	Name string
	// MetricsAddr is the host:port of its Prometheus endpoint.
	MetricsAddr string

	bin     string
	args    []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	past     Usage  // of the incarnations that have exited
	hwm      uint64 // the running incarnation's peak RSS, as last read from /proc
	restarts int
}

// Start starts bin with args, plus a free loopback metrics port and no health probes,
// logging to logDir/name.log.
func Start(bin, logDir, name string, args ...string) (*Process, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p := &Process{
		Name:        name,
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		bin:         bin,
		logPath:     filepath.Join(logDir, name+".log"),
	}
	p.args = append(slices.Clone(args), "--metrics-bind-address", p.MetricsAddr, "--health-probe-bind-address", "0")
	return p, p.start()
}

// StartForTest starts bin as Start does, failing tb when it cannot, and stops it when
// tb ends, within grace. A data race the process reported in its log (a binary Build made
// under the race detector reports them) then fails tb.
func StartForTest(tb testing.TB, grace time.Duration, bin, logDir, name string, args ...string) *Process {
	tb.Helper()
	p, err := Start(bin, logDir, name, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = p.Stop(grace)
		races, err := p.Races()
		if err != nil {
			tb.Error(err)
		}
		if races != "" {
			tb.Errorf("%s reported a data race:\n%s", p.Name, races)
		}
	})
	return p
}

// raceReport opens each report of the race detector.
const raceReport = "WARNING: DATA RACE"

// maxRaceReport is how much of the log Races returns: the first reports in full.
const maxRaceReport = 16 << 10

// Races returns what the race detector reported in the process's log from its first
// report on (at most maxRaceReport bytes), or "" when it reported nothing.
func (p *Process) Races() (string, error) {
	log, err := os.ReadFile(p.logPath)
	if err != nil {
		return "", fmt.Errorf("failed to read the log of %s: %w", p.Name, err)
	}
	i := bytes.Index(log, []byte(raceReport))
	if i < 0 {
		return "", nil
	}
	return string(log[i:min(len(log), i+maxRaceReport)]), nil
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.Name)
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("failed to open the log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...) //nolint:gosec // runs the binary the test just built
	cmd.Stdout, cmd.Stderr = log, log
	// The child dies with the test binary, so a failed test leaves no controller behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("failed to start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.past.CPU += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		// Not rusage's maxrss: Linux carries the forking test binary's resident set
		// into it across exec, so it would report the harness's size, not the child's.
		p.past.PeakRSS = max(p.past.PeakRSS, p.hwm)
		p.cmd, p.hwm = nil, 0
		close(exited)
	}()
	return nil
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Kill sends SIGKILL, as the kernel's OOM killer or a node failure would, and waits
// for the process to be gone.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM and waits up to grace before killing the process.
func (p *Process) Stop(grace time.Duration) error { return p.signal(syscall.SIGTERM, grace) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	// The last look at the incarnation's peak memory, which /proc forgets at its exit.
	_, _ = p.Usage()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("failed to signal %s: %w", p.Name, err)
	}
	if sig != syscall.SIGKILL {
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-exited
	return nil
}

// Restart starts the process again with the same arguments; it must not be running.
func (p *Process) Restart() error {
	p.mu.Lock()
	p.restarts++
	p.mu.Unlock()
	return p.start()
}

// Restarts is how many times Restart was called.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Usage returns the CPU time of every incarnation so far, the running one included, and
// the largest resident set any of them reached, as read from /proc while it ran: on each
// call and just before Kill or Stop. An incarnation that exits on its own counts with
// the peak last read.
func (p *Process) Usage() (Usage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.past
	if p.cmd == nil {
		return u, nil
	}
	cpu, peak, err := procUsage(p.cmd.Process.Pid)
	if err != nil {
		return u, fmt.Errorf("failed to read the usage of %s: %w", p.Name, err)
	}
	p.hwm = max(p.hwm, peak)
	u.CPU += cpu
	u.PeakRSS = max(u.PeakRSS, p.hwm)
	return u, nil
}

// procUsage reads a live process's CPU time (/proc/PID/stat) and its peak resident set
// (VmHWM, /proc/PID/status).
func procUsage(pid int) (time.Duration, uint64, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	stat, err := proc.Stat()
	if err != nil {
		return 0, 0, err
	}
	status, err := proc.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(stat.CPUTime() * float64(time.Second)), status.VmHWM, nil
}

// Metrics scrapes the process's Prometheus endpoint.
func (p *Process) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	families, err := Scrape(ctx, "http://"+p.MetricsAddr+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("failed to scrape %s: %w", p.Name, err)
	}
	return families, nil
}

// Scrape reads the Prometheus metrics served at url.
func Scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	body, err := Get(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return ParseMetrics(body)
}

// Get is the body of a GET of url, which the caller closes; a status other than 200 OK
// is an error.
func Get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// ParseMetrics parses Prometheus' text format.
func ParseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// FreePort asks the kernel for a free loopback port. Another process could take it
// before ours binds it; on loopback in a test that window is harmless.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Label returns the value of the label name on a scraped series, or "" when it has none.
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
