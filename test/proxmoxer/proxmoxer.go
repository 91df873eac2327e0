// Package proxmoxer runs Debian's python3-proxmoxer, a Proxmox VE client banlieue did not
// write, against the project's PVE API simulator: the outside witness of the Proxmox
// tests.
package proxmoxer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/banlieue/banlieue/internal/hostdeps"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// Python3 is Debian's python3, whose dist-packages hold proxmoxer.
const Python3 = "/usr/bin/python3"

// Missing says what is missing when Debian's python3 cannot import proxmoxer and
// requests; "" when it can.
func Missing() string {
	// -I: neither PYTHONPATH nor a user's site-packages stands in for Debian's package.
	out, err := exec.Command(Python3, "-I", "-c", "import requests; from proxmoxer import ProxmoxAPI").CombinedOutput()
	if err == nil {
		return ""
	}
	// The traceback's last line names the missing module.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return fmt.Sprintf("%s cannot import proxmoxer and requests (%v %s); run hack/deps.sh as root to install python3-proxmoxer and python3-requests",
		Python3, err, lines[len(lines)-1])
}

// Require skips the test where proxmoxer is missing, and fails it in CI.
func Require(tb testing.TB) {
	tb.Helper()
	hostdeps.Require(tb, Missing())
}

// Command is Debian's python3 running script against sim: --host, --port and --ca (the
// simulator's CA, written to a file of the test's) come first, then args; the
// simulator's user, password and API token are in the environment (PVE_USER,
// PVE_PASSWORD, PVE_TOKEN_ID, PVE_TOKEN_SECRET).
func Command(ctx context.Context, tb testing.TB, sim *proxmoxsim.Simulator, script string, args ...string) *exec.Cmd {
	tb.Helper()
	ca := filepath.Join(tb.TempDir(), "pve-root-ca.pem")
	if err := os.WriteFile(ca, sim.CACert, 0o600); err != nil {
		tb.Fatal(err)
	}
	u, err := url.Parse(sim.URL)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, Python3, append([]string{"-I", script, "--host", u.Hostname(), "--port", u.Port(), "--ca", ca}, args...)...) //nolint:gosec // the test's own script and arguments
	cmd.Env = append(os.Environ(),
		"PVE_USER="+sim.Username, "PVE_PASSWORD="+sim.Password,
		"PVE_TOKEN_ID="+sim.TokenID, "PVE_TOKEN_SECRET="+sim.TokenSecret)
	return cmd
}

// VM is what proxmoxer reads of one VM: its config's tags, description and net0, its
// current status and QEMU PID, and its CPUs, memory and hotplug settings with what is
// pending for its next power cycle.
type VM struct {
	Tags        string `json:"tags"`
	Description string `json:"description"`
	Net0        string `json:"net0"`
	Status      string `json:"status"`
	PID         int    `json:"pid"`
	// Hardware are the config's hotplug, cores, sockets, vcpus, numa and memory, as
	// GET config answers them (with the pending values in); Current the same keys as
	// the VM runs them (GET config?current=1).
	Hardware map[string]string `json:"hardware"`
	Current  map[string]string `json:"current"`
	// Pending are the pending values GET pending lists, by key, and PendingDelete the
	// keys it lists pending deletion.
	Pending       map[string]string `json:"pending"`
	PendingDelete []string          `json:"pending_delete"`
}

// ReadVM reads the VM vmid on node through proxmoxer, with the API token. The caller
// has called Require.
func ReadVM(tb testing.TB, sim *proxmoxsim.Simulator, node string, vmid int) VM {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := Command(ctx, tb, sim, readVMScript(), "--node", node, "--vmid", strconv.Itoa(vmid))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("proxmoxer: %v\n%s", err, stderr.String())
	}
	var vm VM
	if err := json.Unmarshal(out, &vm); err != nil {
		tb.Fatalf("proxmoxer printed %q: %v", out, err)
	}
	return vm
}

// readVMScript is read_vm.py beside this file, wherever the test runs from.
func readVMScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "read_vm.py")
}
