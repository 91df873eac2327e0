package proxmoxsim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	proxmox "github.com/luthermonson/go-proxmox"
)

// opts turns key/value pairs into go-proxmox's config options.
func opts(kv ...any) []proxmox.VirtualMachineOption {
	var out []proxmox.VirtualMachineOption
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, proxmox.VirtualMachineOption{Name: kv[i].(string), Value: kv[i+1]})
	}
	return out
}

// cloneVM clones the default template to vmid and applies the config kv to it while
// it is stopped.
func cloneVM(t *testing.T, c *proxmox.Client, vmid int, kv ...any) *proxmox.VirtualMachine {
	t.Helper()
	ctx := context.Background()
	_, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: vmid})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(vmid)
	if len(kv) > 0 {
		if err := vm.ConfigSync(ctx, opts(kv...)...); err != nil {
			t.Fatal(err)
		}
	}
	return vm
}

// configOf reads GET config of a VM, with current=1 when current, the values as
// strings.
func configOf(t *testing.T, c *proxmox.Client, vmid int, current bool) map[string]string {
	t.Helper()
	path := fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid)
	if current {
		path += "?current=1"
	}
	var raw map[string]any
	if err := c.Get(context.Background(), path, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range raw {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// pendingOf reads GET pending of a VM: the keys with a pending value or deletion,
// as "value -> pending" or "value -> (deleted)", and the digest.
func pendingOf(t *testing.T, c *proxmox.Client, vmid int) (map[string]string, string) {
	t.Helper()
	var items []map[string]any
	if err := c.Get(context.Background(), fmt.Sprintf("/nodes/pve1/qemu/%d/pending", vmid), &items); err != nil {
		t.Fatal(err)
	}
	out, dig := map[string]string{}, ""
	for _, it := range items {
		key := it["key"].(string)
		switch {
		case key == "digest":
			dig = it["value"].(string)
		case it["delete"] != nil:
			out[key] = fmt.Sprintf("%v -> (deleted)", it["value"])
		case it["pending"] != nil:
			value := "(none)"
			if v, ok := it["value"]; ok {
				value = fmt.Sprint(v)
			}
			out[key] = fmt.Sprintf("%s -> %v", value, it["pending"])
		}
	}
	return out, dig
}

// pick returns conf's values of keys, "" for missing ones.
func pick(conf map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = conf[k]
	}
	return out
}

func TestAConfigChangeToARunningVMHotplugsWhatItCanAndKeepsTheRestPending(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	const vmid = 170
	vm := cloneVM(t, c, vmid, "hotplug", "network,disk,usb,cpu,memory", "numa", 1, "cores", 4, "vcpus", 2, "memory", 2048)
	if p, _ := pendingOf(t, c, vmid); len(p) > 0 {
		t.Fatalf("a stopped VM's change is pending: %v", p)
	}
	must(t)(vm.Start(ctx))
	keys := []string{"cores", "vcpus", "memory", "tags", "net1", "scsi1", "efidisk0", "unused0"}
	steps := []struct {
		name string
		kv   []any
		// errors are the 400's complaints by key, none when nil.
		errors map[string]string
		// current are the values the VM runs with (GET config?current=1), of keys;
		// pending what GET pending lists.
		current, pending map[string]string
	}{{
		name:    "cores wait for the next power cycle, tags apply at once",
		kv:      []any{"cores", 8, "tags", "web"},
		current: map[string]string{"cores": "4", "vcpus": "2", "memory": "2048", "tags": "web"},
		pending: map[string]string{"cores": "4 -> 8"},
	}, {
		name:    "vcpus within cores × sockets hotplug",
		kv:      []any{"vcpus", 3},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "2048", "tags": "web"},
		pending: map[string]string{"cores": "4 -> 8"},
	}, {
		name:    "vcpus beyond cores × sockets are refused and stay pending",
		kv:      []any{"vcpus", 6},
		errors:  map[string]string{"vcpus": "hotplug problem - you can't add more vcpus than maxcpus"},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "2048", "tags": "web"},
		pending: map[string]string{"cores": "4 -> 8", "vcpus": "3 -> 6"},
	}, {
		name:    "memory grows by DIMMs, to the step at or above the size asked",
		kv:      []any{"memory", 3000},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "3072", "tags": "web"},
		pending: map[string]string{"cores": "4 -> 8", "vcpus": "3 -> 6"},
	}, {
		name:    "memory beyond the host's maximum is refused and stays pending",
		kv:      []any{"memory", 600000},
		errors:  map[string]string{"memory": "hotplug problem - you cannot add more memory than max mem 524288 MB!"},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "3072", "tags": "web"},
		pending: map[string]string{"cores": "4 -> 8", "vcpus": "3 -> 6", "memory": "3072 -> 600000"},
	}, {
		name:    "a NIC and a SCSI disk hotplug; an EFI disk waits",
		kv:      []any{"net1", "virtio=BC:24:11:00:00:01,bridge=vmbr0", "scsi1", "local-lvm:1", "efidisk0", "local-lvm:1,efitype=4m"},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "3072", "tags": "web", "net1": "virtio=BC:24:11:00:00:01,bridge=vmbr0", "scsi1": "local-lvm:vm-170-disk-2,size=1G"},
		pending: map[string]string{"cores": "4 -> 8", "vcpus": "3 -> 6", "memory": "3072 -> 600000", "efidisk0": "(none) -> local-lvm:vm-170-disk-1,efitype=4m,size=4M"},
	}, {
		name:    "reverting drops pending values",
		kv:      []any{"revert", "cores,vcpus,memory,efidisk0"},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "3072", "tags": "web", "net1": "virtio=BC:24:11:00:00:01,bridge=vmbr0", "scsi1": "local-lvm:vm-170-disk-2,size=1G", "unused0": "local-lvm:vm-170-disk-1"},
		pending: map[string]string{},
	}, {
		name:    "deleting a NIC hotplugs; deleting the hotplug setting that has cpu waits",
		kv:      []any{"delete", "net1,hotplug"},
		current: map[string]string{"cores": "4", "vcpus": "3", "memory": "3072", "tags": "web", "scsi1": "local-lvm:vm-170-disk-2,size=1G", "unused0": "local-lvm:vm-170-disk-1"},
		pending: map[string]string{"hotplug": "network,disk,usb,cpu,memory -> (deleted)"},
	}}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			_, before := pendingOf(t, c, vmid)
			err := vm.ConfigSync(ctx, opts(st.kv...)...)
			ae, isAPIErr := proxmox.AsAPIError(err)
			switch {
			case st.errors == nil && err != nil:
				t.Fatalf("config update: %v", err)
			case st.errors != nil && (!isAPIErr || ae.StatusCode != http.StatusBadRequest || !cmp.Equal(ae.Errors, st.errors)):
				t.Fatalf("config update: %v, want 400 with %q", err, st.errors)
			}
			if diff := cmp.Diff(pick(st.current, keys...), pick(configOf(t, c, vmid, true), keys...)); diff != "" {
				t.Errorf("GET config?current=1 (-want +got):\n%s", diff)
			}
			pending, after := pendingOf(t, c, vmid)
			if diff := cmp.Diff(st.pending, pending); diff != "" {
				t.Errorf("GET pending (-want +got):\n%s", diff)
			}
			if after == before {
				t.Errorf("the digest %s did not change", after)
			}
			// GET config answers with the pending values in.
			withPending := configOf(t, c, vmid, false)
			for k, p := range st.pending {
				if _, to, _ := strings.Cut(p, " -> "); to == "(deleted)" && withPending[k] != "" {
					t.Errorf("GET config has %s = %s, pending deletion", k, withPending[k])
				} else if to != "(deleted)" && withPending[k] != to {
					t.Errorf("GET config has %s = %s, want the pending %s", k, withPending[k], to)
				}
			}
		})
	}
}

func TestPendingChangesApplyAtTheNextPowerCycle(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	tests := []struct {
		name   string
		action func(*proxmox.VirtualMachine) (*proxmox.Task, error)
		// applied is whether the pending cores apply.
		applied bool
	}{
		{"a stop applies them", func(vm *proxmox.VirtualMachine) (*proxmox.Task, error) { return vm.Stop(ctx) }, true},
		{"a shutdown applies them", func(vm *proxmox.VirtualMachine) (*proxmox.Task, error) { return vm.Shutdown(ctx) }, true},
		{"a reboot applies them", func(vm *proxmox.VirtualMachine) (*proxmox.Task, error) { return vm.Reboot(ctx) }, true},
		{"a reset does not", func(vm *proxmox.VirtualMachine) (*proxmox.Task, error) { return vm.Reset(ctx) }, false},
		{"a pause does not", func(vm *proxmox.VirtualMachine) (*proxmox.Task, error) { return vm.Pause(ctx) }, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmid := 180 + i
			vm := cloneVM(t, c, vmid)
			must(t)(vm.Start(ctx))
			if err := vm.ConfigSync(ctx, opts("cores", 3)...); err != nil {
				t.Fatal(err)
			}
			must(t)(tt.action(vm))
			conf, _ := s.VM(vmid)
			got, _ := pendingOf(t, c, vmid)
			want := []any{"2", map[string]string{"cores": "2 -> 3"}}
			if tt.applied {
				want = []any{"3", map[string]string{}}
			}
			if diff := cmp.Diff(want, []any{conf["cores"], got}); diff != "" {
				t.Errorf("cores and pending (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a start applies them", func(t *testing.T) {
		vm := cloneVM(t, c, 190)
		must(t)(vm.Start(ctx))
		if err := vm.ConfigSync(ctx, opts("cores", 3)...); err != nil {
			t.Fatal(err)
		}
		// A stop that qemu-server's cleanup did not follow (a crash): the VM is
		// stopped with its change pending, which the next start applies.
		s.mu.Lock()
		s.vms[190].running = false
		s.mu.Unlock()
		must(t)(vm.Start(ctx))
		if conf, _ := s.VM(190); conf["cores"] != "3" {
			t.Errorf("cores %s after the start, want 3", conf["cores"])
		}
	})
}

func TestAStartRefusesHardwareQEMUCannotRun(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	tests := []struct {
		name string
		kv   []any
		want string
	}{
		{"more cores than the node's CPUs", []any{"cores", 32}, "MAX 16 vcpus allowed per VM on this node"},
		{"more vcpus than cores × sockets", []any{"cores", 2, "vcpus", 4}, "start failed: QEMU exited with code 1"},
		{"memory hotplug without NUMA", []any{"hotplug", "memory"}, "NUMA needs to be enabled for memory hotplug"},
		{"memory hotplug below its static memory", []any{"hotplug", "memory", "numa", 1, "memory", 768}, "minimum memory must be 1024MB"},
		{"memory hotplug beyond the host's maximum", []any{"hotplug", "memory", "numa", 1, "memory", 600000}, "Total memory is bigger than 524288MB"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vm := cloneVM(t, c, 200+i, tt.kv...)
			if err := wait(t)(vm.Start(ctx)); !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("start: %v, want the task failed with %q", err, tt.want)
			}
		})
	}
	t.Run("a hotplug feature PVE does not know is refused", func(t *testing.T) {
		vm := c.NodeRef("pve1").VirtualMachineRef(200)
		err := vm.ConfigSync(ctx, opts("hotplug", "cpu,ram")...)
		if ae, ok := proxmox.AsAPIError(err); !ok || ae.Errors["hotplug"] != "invalid format - invalid hotplug feature 'ram'" {
			t.Errorf("hotplug=cpu,ram: %v, want a 400 naming the feature", err)
		}
	})
}
