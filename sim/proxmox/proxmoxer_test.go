package proxmoxsim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	"github.com/banlieue/banlieue/test/proxmoxer"
)

// proxmoxerScript drives a VM's life through proxmoxer and reports each step.
const proxmoxerScript = "testdata/proxmoxer_life.py"

// proxmoxerSteps are the steps proxmoxerScript reports, in order: the VM's life, then
// the error probes. A step the script stops reporting fails the test.
var proxmoxerSteps = []string{
	"login", "nextid", "clone", "config_sync", "config_async", "resize", "start", "status",
	"agent", "shutdown", "stop", "delete",
	"unknown_path", "bad_parameter", "bad_token", "bad_password", "missing_vm",
}

// proxmoxerTasks are the task types the life starts, each of which must end OK.
var proxmoxerTasks = []string{"qmclone", "qmconfig", "resize", "qmstart", "qmshutdown", "qmstop", "qmdestroy"}

// stepResult is one line proxmoxerScript prints.
type stepResult struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// TestProxmoxerDrivesAWholeVMLife is the witness of a client banlieue did not write:
// Debian's python3-proxmoxer, as its users call it, clones, configures, resizes,
// starts, reads, shuts down, stops and deletes a VM, waiting on each task's status,
// and meets PVE's errors where PVE gives them, with a ticket and with an API token.
func TestProxmoxerDrivesAWholeVMLife(t *testing.T) {
	proxmoxer.Require(t)
	tests := []struct {
		auth string
		// user is who the simulator's tasks say started them.
		user func(*proxmoxsim.Simulator) string
	}{
		{auth: "ticket", user: func(s *proxmoxsim.Simulator) string { return s.Username }},
		{auth: "token", user: func(s *proxmoxsim.Simulator) string { return s.TokenID }},
	}
	for _, tt := range tests {
		t.Run("with a "+tt.auth, func(t *testing.T) {
			t.Parallel()
			s, err := proxmoxsim.Start(proxmoxsim.Options{
				// Tasks last long enough to be seen running, and the agent answers a
				// while after start, so the script's waits are exercised.
				TaskDelay:       100 * time.Millisecond,
				GuestAgentDelay: time.Second,
				// No 3-second wait before the bad token and bad password probes' 401.
				UnauthorizedDelay: -1,
			})
			if err != nil {
				t.Fatalf("failed to start the Proxmox VE simulator: %v", err)
			}
			t.Cleanup(s.Stop)

			results, stderr, err := runProxmoxer(t, s, tt.auth)
			for _, step := range proxmoxerSteps {
				r, ok := results[step]
				switch {
				case !ok:
					t.Errorf("%s: not reached", step)
				case !r.OK:
					t.Errorf("%s failed: %s", step, r.Detail)
				default:
					t.Logf("%-13s ok  %s", step, r.Detail)
				}
			}
			for step := range results {
				if !slices.Contains(proxmoxerSteps, step) {
					t.Errorf("the script reported step %q, which the test does not know", step)
				}
			}
			if err != nil {
				t.Errorf("%s: %v\nstderr:\n%s", proxmoxerScript, err, stderr)
			}

			// What the simulator saw agrees: only the template is left, and every task
			// of the life ran as the client's user and ended OK.
			if vms := s.VMs(); len(vms) != 1 || vms[0].VMID != proxmoxsim.FirstTemplateVMID {
				t.Errorf("VMs left after the life: %+v, want only template %d", vms, proxmoxsim.FirstTemplateVMID)
			}
			tasks := s.Tasks()
			types := make([]string, 0, len(tasks))
			for _, task := range tasks {
				types = append(types, task.Type)
				if task.Running || task.ExitStatus != "OK" || task.User != tt.user(s) {
					t.Errorf("task %s: running %v, exit status %q, user %q; want finished, OK, by %s",
						task.UPID, task.Running, task.ExitStatus, task.User, tt.user(s))
				}
			}
			for _, typ := range proxmoxerTasks {
				if !slices.Contains(types, typ) {
					t.Errorf("no %s task ran; tasks: %v", typ, types)
				}
			}
		})
	}
}

// runProxmoxer runs proxmoxerScript against s with a ticket or a token (auth) and
// returns its results by step, its stderr, and how it exited.
func runProxmoxer(t *testing.T, s *proxmoxsim.Simulator, auth string) (map[string]stepResult, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := proxmoxer.Command(ctx, t, s, proxmoxerScript, "--auth", auth,
		"--node", "pve1", "--template", fmt.Sprint(proxmoxsim.FirstTemplateVMID))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	results := map[string]stepResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r stepResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Step == "" {
			t.Errorf("%s printed %q, not a step's result", proxmoxerScript, sc.Text())
			continue
		}
		results[r.Step] = r
	}
	return results, strings.TrimSpace(stderr.String()), runErr
}
