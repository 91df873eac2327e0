package devcmd

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSimProxmoxRefusesToServeBeyondLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":8006", "[::]:0", "192.0.2.7:8006"} {
		t.Run(addr, func(t *testing.T) {
			cmd := newSimProxmoxCommand()
			caFile := filepath.Join(t.TempDir(), "pve-ca.pem")
			cmd.SetArgs([]string{"--addr", addr, "--ca-file", caFile})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), "only on loopback") {
				t.Fatalf("sim proxmox --addr %s = %v, want it refused for not being loopback", addr, err)
			}
		})
	}
}
