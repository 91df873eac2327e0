// Package govc runs govc, govmomi's vSphere CLI, against the project's vCenter
// simulator: the outside witness of the vSphere tests. The command is built from
// ./test/govc/cmd/govc, whose every command is govmomi's own.
package govc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/testenv"
)

// runTimeout bounds one govc command.
const runTimeout = time.Minute

// Govc runs govc against one simulator, logged in with its credentials and trusting its
// CA alone.
type Govc struct {
	bin string
	env []string
}

// New builds govc into the test's temporary folder and points it at sim.
func New(tb testing.TB, sim *vspheretest.Simulator) *Govc {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "govc")
	cmd := exec.Command("go", "build", "-o", bin, "./test/govc/cmd/govc") //nolint:gosec // builds this repository's own command
	cmd.Dir = testenv.RepoPath(".")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("failed to build govc: %v\n%s", err, out)
	}
	ca := filepath.Join(dir, "vcenter-ca.pem")
	if err := os.WriteFile(ca, sim.CAPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	// Each command logs in and out: no session outlives it in the simulator (whose
	// sessions some tests count), and none is kept in the user's home.
	return &Govc{bin: bin, env: append(os.Environ(),
		"GOVC_URL="+sim.URL, "GOVC_USERNAME="+sim.Username, "GOVC_PASSWORD="+sim.Password,
		"GOVC_TLS_CA_CERTS="+ca, "GOVC_INSECURE=false",
		"GOVC_PERSIST_SESSION=false", "GOVMOMI_HOME="+dir)}
}

// Run runs govc with args and returns what it wrote to its standard output, or an error
// with what it wrote to its standard error.
func (g *Govc) Run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, args...) //nolint:gosec // the test's own arguments
	cmd.Env = g.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("govc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// JSON runs govc with args and decodes its standard output into v.
func (g *Govc) JSON(v any, args ...string) error {
	out, err := g.Run(args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("govc %s: its output does not decode: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// VM is what govc's vm.info -json reports of a VM, as far as banlieue's tests read it.
type VM struct {
	Name   string `json:"name"`
	Config struct {
		UUID         string `json:"uuid"`
		InstanceUUID string `json:"instanceUuid"`
		Hardware     struct {
			NumCPU   int32 `json:"numCPU"`
			MemoryMB int64 `json:"memoryMB"`
			// Device holds every virtual device; only disks have a capacity.
			Device []struct {
				CapacityInKB int64 `json:"capacityInKB"`
			} `json:"device"`
		} `json:"hardware"`
		ExtraConfig []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"extraConfig"`
	} `json:"config"`
	Runtime struct {
		PowerState string `json:"powerState"`
	} `json:"runtime"`
}

// DisksGiB are the sizes of the VM's disks in GiB, in device order.
func (vm *VM) DisksGiB() []int64 {
	var out []int64
	for _, d := range vm.Config.Hardware.Device {
		if d.CapacityInKB > 0 {
			out = append(out, d.CapacityInKB>>20)
		}
	}
	return out
}

// ExtraConfig is the VM's extraConfig value for key; "" when it has none.
func (vm *VM) ExtraConfig(key string) string {
	for _, o := range vm.Config.ExtraConfig {
		if o.Key == key {
			s, _ := o.Value.(string)
			return s
		}
	}
	return ""
}

// VMByUUID is the VM whose BIOS UUID is uuid, as govc's vm.info reads it with its
// extraConfig (-e).
func (g *Govc) VMByUUID(uuid string) (*VM, error) {
	var info struct {
		VirtualMachines []VM `json:"virtualMachines"`
	}
	if err := g.JSON(&info, "vm.info", "-json", "-e", "-vm.uuid", uuid); err != nil {
		return nil, err
	}
	if len(info.VirtualMachines) != 1 {
		return nil, fmt.Errorf("govc vm.info -vm.uuid %s reported %d VMs, want 1", uuid, len(info.VirtualMachines))
	}
	return &info.VirtualMachines[0], nil
}

// VMsNamed are the inventory paths of the VMs named name, as govc's find lists them.
func (g *Govc) VMsNamed(name string) ([]string, error) {
	out, err := g.Run("find", "/", "-type", "m", "-name", name)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
