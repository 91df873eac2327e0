package devcmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEachSimulatorRefusesToServeBeyondLoopback: a simulator prints fixed credentials,
// so neither listens on an address other machines reach, whatever --addr says.
func TestEachSimulatorRefusesToServeBeyondLoopback(t *testing.T) {
	for name, newCommand := range map[string]func() *cobra.Command{"proxmox": newSimProxmoxCommand, "vsphere": newSimVSphereCommand} {
		for _, addr := range []string{"0.0.0.0:0", ":8006", "[::]:0", "192.0.2.7:8006"} {
			t.Run(name+" "+addr, func(t *testing.T) {
				cmd := newCommand()
				caFile := filepath.Join(t.TempDir(), "ca.pem")
				cmd.SetArgs([]string{"--addr", addr, "--ca-file", caFile})
				cmd.SilenceUsage, cmd.SilenceErrors = true, true
				err := cmd.Execute()
				if err == nil || !strings.Contains(err.Error(), "only on loopback") {
					t.Fatalf("sim %s --addr %s = %v, want it refused for not being loopback", name, addr, err)
				}
			})
		}
	}
}
