package proxmox

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// hotplugKeys are the config keys of a VM's CPUs, memory and headroom.
var hotplugKeys = []string{"hotplug", "cores", "sockets", "vcpus", "numa", "memory"}

// withParams sets Provider parameters.
func withParams(kv ...string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.Parameters[kv[i]] = kv[i+1]
		}
	}
}

// noPending fails the test when the VM's config holds pending changes.
func noPending(t *testing.T, vm proxmoxsim.VMState) {
	t.Helper()
	if len(vm.Pending) > 0 || len(vm.PendingDelete) > 0 {
		t.Errorf("the VM's config holds pending changes %v, deletions %v; want none", vm.Pending, vm.PendingDelete)
	}
}

func TestAVMIsCreatedWithTheProvidersHotplugHeadroom(t *testing.T) {
	tests := []struct {
		name   string
		params []string
		// memoryMiB is the machine's memory, 2048 when 0.
		memoryMiB int64
		want      map[string]string
	}{{
		name: "without the parameter, the VM has PVE's default hotplug and its CPUs as cores",
		want: map[string]string{"hotplug": "", "cores": "2", "sockets": "1", "vcpus": "", "numa": "", "memory": "2048"},
	}, {
		name:   "cpu and memory: cores four times the CPUs, those present as vcpus, memory hotplug with NUMA",
		params: []string{providersdk.ParamHotplug, "cpu,memory"},
		want:   map[string]string{"hotplug": "network,disk,usb,cpu,memory", "cores": "8", "sockets": "1", "vcpus": "2", "numa": "1", "memory": "2048"},
	}, {
		name:   "maxCPUs bounds the cores",
		params: []string{providersdk.ParamHotplug, "cpu", providersdk.ParamMaxCPUs, "6"},
		want:   map[string]string{"hotplug": "network,disk,usb,cpu", "cores": "6", "sockets": "1", "vcpus": "2", "numa": "", "memory": "2048"},
	}, {
		name:   "the node's 16 CPUs bound the cores, as PVE starts no VM with more",
		params: []string{providersdk.ParamHotplug, "cpu", providersdk.ParamMaxCPUs, "64"},
		want:   map[string]string{"hotplug": "network,disk,usb,cpu", "cores": "16", "sockets": "1", "vcpus": "2", "numa": "", "memory": "2048"},
	}, {
		name:   "memory alone leaves the CPUs as they are",
		params: []string{providersdk.ParamHotplug, "memory"},
		want:   map[string]string{"hotplug": "network,disk,usb,memory", "cores": "2", "sockets": "1", "vcpus": "", "numa": "1", "memory": "2048"},
	}, {
		name:      "a VM below memory hotplug's 1024 MiB gets none, which PVE would not start",
		params:    []string{providersdk.ParamHotplug, "memory"},
		memoryMiB: 768,
		want:      map[string]string{"hotplug": "", "cores": "2", "sockets": "1", "vcpus": "", "numa": "", "memory": "768"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			s := connect(t, sim, newDriver(sim), withParams(tt.params...))
			m := newMachine("0d1e2f3a-1c8a-4a52-9a55-0c3c0b1f0a10")
			if tt.memoryMiB > 0 {
				m.Spec.Hardware.MemoryMiB = tt.memoryMiB
			}
			o := converge(t, s, m)
			vm := theVM(t, sim)
			if diff := cmp.Diff(tt.want, pick(vm.Config, hotplugKeys...)); diff != "" {
				t.Errorf("VM config (-want +got):\n%s", diff)
			}
			noPending(t, vm)
			if vm.Status != "running" {
				t.Errorf("the VM is %s, want running", vm.Status)
			}
			if o.Hardware == nil || o.Hardware.CPUs != 2 || o.Hardware.MemoryMiB != m.Spec.Hardware.MemoryMiB {
				t.Errorf("status.hardware %+v, want the machine's 2 CPUs and %d MiB", o.Hardware, m.Spec.Hardware.MemoryMiB)
			}
		})
	}
}

func TestARunningVMWithHotplugGrowsOnlineWithinItsBounds(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, newDriver(sim), withParams(providersdk.ParamHotplug, "cpu,memory"))
	m := newMachine("1e2f3a4b-1c8a-4a52-9a55-0c3c0b1f0a11")
	boot := converge(t, s, m).BootID
	powerCycle := func(m *providersdk.Machine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff }
	steps := []struct {
		name   string
		change func(*providersdk.Machine)
		// pending is what waits for the next power cycle; newBoot is whether the VM
		// was power cycled.
		pending []string
		newBoot bool
		want    map[string]string
	}{{
		name:   "more CPUs and memory within the bounds are made at once, in the same boot",
		change: func(m *providersdk.Machine) { m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 4096 },
		want:   map[string]string{"cores": "8", "vcpus": "4", "memory": "4096"},
	}, {
		name:    "CPUs beyond the cores wait for the next power cycle",
		change:  func(m *providersdk.Machine) { m.Spec.Hardware.CPUs = 12 },
		pending: []string{"CPUs from 4 to 12"},
		want:    map[string]string{"cores": "8", "vcpus": "4", "memory": "4096"},
	}, {
		name:    "memory between PVE's DIMM steps waits too (1 GiB steps above 17 GiB)",
		change:  func(m *providersdk.Machine) { m.Spec.Hardware.MemoryMiB = 20000 },
		pending: []string{"CPUs from 4 to 12", "memory from 4096 MiB to 20000 MiB"},
		want:    map[string]string{"cores": "8", "vcpus": "4", "memory": "4096"},
	}, {
		name:    "fewer CPUs wait, which PVE would unplug from the running guest",
		change:  func(m *providersdk.Machine) { m.Spec.Hardware.CPUs = 3 },
		pending: []string{"CPUs from 4 to 3", "memory from 4096 MiB to 20000 MiB"},
		want:    map[string]string{"cores": "8", "vcpus": "4", "memory": "4096"},
	}, {
		name:    "powered off, the VM takes what waited, and keeps its cores",
		change:  powerCycle,
		newBoot: true,
		want:    map[string]string{"cores": "8", "vcpus": "3", "memory": "20000"},
	}, {
		name: "CPUs beyond the cores of a stopped VM raise the cores to the new bound, at most the node's 16",
		change: func(m *providersdk.Machine) {
			m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 12, 4096
		},
		newBoot: true,
		want:    map[string]string{"cores": "16", "vcpus": "12", "memory": "4096"},
	}, {
		name: "powered on again, the VM grows online to its new bound",
		change: func(m *providersdk.Machine) {
			m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		},
		newBoot: true,
		want:    map[string]string{"cores": "16", "vcpus": "12", "memory": "4096"},
	}, {
		name:   "and grows online again",
		change: func(m *providersdk.Machine) { m.Spec.Hardware.CPUs = 16 },
		want:   map[string]string{"cores": "16", "vcpus": "16", "memory": "4096"},
	}}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.change(m)
			o := converge(t, s, m)
			if !o.UpToDate || !cmp.Equal(o.PendingRestart, st.pending) {
				t.Errorf("up to date %v, pending %q; want up to date with %q pending", o.UpToDate, o.PendingRestart, st.pending)
			}
			if o.PowerState == banlieuev1.PowerStatePoweredOn {
				if st.newBoot == (o.BootID == boot) {
					t.Errorf("boot %s, was %s; want a new boot %v", o.BootID, boot, st.newBoot)
				}
				boot = o.BootID
			}
			vm := theVM(t, sim)
			if diff := cmp.Diff(st.want, pick(vm.Config, "cores", "vcpus", "memory")); diff != "" {
				t.Errorf("VM config (-want +got):\n%s", diff)
			}
			noPending(t, vm)
			// status.hardware is what the VM runs with.
			if want := (providersdk.Hardware{CPUs: int32(atoiOr(st.want["vcpus"], 0)), MemoryMiB: atoiOr(st.want["memory"], 0),
				DiskBytes: []int64{proxmoxtest.TemplateDiskGiB * providersdk.GiB}}); !cmp.Equal(o.Hardware, &want) {
				t.Errorf("status.hardware %+v, want %+v", o.Hardware, want)
			}
		})
	}
}

func TestAGrowthWithoutHotplugWaitsForTheNextPowerCycle(t *testing.T) {
	tests := []struct {
		name   string
		params []string
		grow   func(*providersdk.Machine)
		want   []string
	}{{
		name: "no hotplug parameter: CPUs and memory wait",
		grow: func(m *providersdk.Machine) { m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 4096 },
		want: []string{"CPUs from 2 to 4", "memory from 2048 MiB to 4096 MiB"},
	}, {
		name:   "memory hotplug only: CPUs wait, memory grows",
		params: []string{providersdk.ParamHotplug, "memory"},
		grow:   func(m *providersdk.Machine) { m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 4096 },
		want:   []string{"CPUs from 2 to 4"},
	}, {
		name:   "CPU hotplug only: memory waits, CPUs grow",
		params: []string{providersdk.ParamHotplug, "cpu"},
		grow:   func(m *providersdk.Machine) { m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 4, 4096 },
		want:   []string{"memory from 2048 MiB to 4096 MiB"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			s := connect(t, sim, newDriver(sim), withParams(tt.params...))
			m := newMachine("2f3a4b5c-1c8a-4a52-9a55-0c3c0b1f0a12")
			boot := converge(t, s, m).BootID
			tt.grow(m)
			o := converge(t, s, m)
			if !o.UpToDate || !cmp.Equal(o.PendingRestart, tt.want) || o.BootID != boot {
				t.Errorf("up to date %v, pending %q, boot %s (was %s); want up to date in the same boot with %q pending",
					o.UpToDate, o.PendingRestart, o.BootID, boot, tt.want)
			}
			noPending(t, theVM(t, sim))
		})
	}
}

func TestWhatPVEHoldsPendingFollowsTheMachine(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim), withParams(providersdk.ParamHotplug, "cpu,memory"))
	m := newMachine("3a4b5c6d-1c8a-4a52-9a55-0c3c0b1f0a13")
	// 257 GiB and 769 GiB are DIMM steps; the simulated host takes 512 GiB.
	m.Spec.Hardware.MemoryMiB = 263168
	converge(t, s, m)
	vm := theVM(t, sim)

	t.Run("memory PVE refuses to hotplug waits for the next power cycle, as PVE holds it", func(t *testing.T) {
		m.Spec.Hardware.MemoryMiB = 787456
		o := converge(t, s, m)
		if want := []string{"memory from 263168 MiB to 787456 MiB"}; !o.UpToDate || !cmp.Equal(o.PendingRestart, want) {
			t.Errorf("up to date %v, pending %q; want up to date with %q pending", o.UpToDate, o.PendingRestart, want)
		}
		got := theVM(t, sim)
		if diff := cmp.Diff(map[string]string{"memory": "787456"}, got.Pending); diff != "" || got.Config["memory"] != "263168" {
			t.Errorf("memory %s, pending (-want +got):\n%s", got.Config["memory"], diff)
		}
		// Observe and Update agree: nothing more to do now.
		if task, err := observeUpdate(t, s, m); err != nil || task.InFlight() {
			t.Errorf("Update after it: task %+v, %v; want nothing", task, err)
		}
	})

	t.Run("a pending value the machine no longer wants is reverted", func(t *testing.T) {
		m.Spec.Hardware.MemoryMiB = 263168
		o := converge(t, s, m)
		if len(o.PendingRestart) > 0 {
			t.Errorf("pending %q, want nothing", o.PendingRestart)
		}
		noPending(t, theVM(t, sim))
	})

	t.Run("a VM the machine asks off is stopped for what PVE holds pending, not written again", func(t *testing.T) {
		m.Spec.Hardware.MemoryMiB = 787456
		converge(t, s, m)
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		if o := converge(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOff {
			t.Fatalf("power state %s, want off", o.PowerState)
		}
		got := theVM(t, sim)
		noPending(t, got)
		if got.Config["memory"] != "787456" {
			t.Errorf("memory %s, want the 787456 PVE held pending, applied as the VM stopped", got.Config["memory"])
		}
		// Back to a size the host takes, and on again.
		m.Spec.Hardware.MemoryMiB, m.Spec.PowerState = 263168, banlieuev1.PowerStatePoweredOn
		if o := converge(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn || o.Hardware.MemoryMiB != 263168 {
			t.Errorf("power %s, hardware %+v; want on with 263168 MiB", o.PowerState, o.Hardware)
		}
	})

	t.Run("someone else's pending change of the CPUs is reverted", func(t *testing.T) {
		if err := s.api.SetConfig(ctx, vm.Node, vm.VMID, pve.ConfigChange{Set: map[string]any{"cores": 4}}); err != nil {
			t.Fatal(err)
		}
		if got := theVM(t, sim).Pending; got["cores"] != "4" {
			t.Fatalf("pending %v, want cores 4", got)
		}
		o, err := s.Observe(ctx, m)
		if err != nil || o.UpToDate || len(o.PendingRestart) > 0 {
			t.Errorf("Observe: up to date %v, pending %q, %v; want a revert to make", o.UpToDate, o.PendingRestart, err)
		}
		converge(t, s, m)
		got := theVM(t, sim)
		noPending(t, got)
		if got.Config["cores"] != "8" {
			t.Errorf("cores %s, want 8", got.Config["cores"])
		}
	})

	t.Run("an update repeated from a stale observation is refused by the digest, not made twice", func(t *testing.T) {
		m.Spec.Hardware.CPUs = 3
		o, err := s.Observe(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, m, o); err != nil {
			t.Fatal(err)
		}
		before := theVM(t, sim)
		if _, err := s.Update(ctx, m, o); !providersdk.IsInFlight(err) {
			t.Errorf("Update again from the same observation: %v, want it refused as in flight", err)
		}
		if after := theVM(t, sim); !cmp.Equal(before.Config, after.Config) || before.Config["vcpus"] != "3" {
			t.Errorf("vcpus %s, then the config changed:\n%s", before.Config["vcpus"], cmp.Diff(before.Config, after.Config))
		}
		if o := converge(t, s, m); len(o.PendingRestart) > 0 {
			t.Errorf("pending %q, want nothing", o.PendingRestart)
		}
	})
}

func TestHotplugParametersThatDoNotParseAreReportedOnTheProvider(t *testing.T) {
	tests := []struct {
		name   string
		params []string
		want   string
	}{{
		name:   "maxCPUs that is no number",
		params: []string{providersdk.ParamHotplug, "cpu", providersdk.ParamMaxCPUs, "many"},
		want:   `parameters.maxCPUs "many" is not a whole number from 1 to 1024; set it in the Provider, or remove it for the default`,
	}, {
		name:   "maxCPUs of 0",
		params: []string{providersdk.ParamHotplug, "cpu", providersdk.ParamMaxCPUs, "0"},
		want:   `parameters.maxCPUs "0" is not a whole number from 1 to 1024; set it in the Provider, or remove it for the default`,
	}, {
		name:   "a hotplug feature that is neither cpu nor memory",
		params: []string{providersdk.ParamHotplug, "cpu,disk"},
		want:   `parameters.hotplug "cpu,disk": "disk" is neither cpu nor memory; list what may grow while a VM runs, e.g. cpu,memory, in the Provider`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			s := connect(t, sim, newDriver(sim), withParams(tt.params...))
			if _, err := s.Inventory(context.Background()); err == nil || err.Error() != tt.want {
				t.Errorf("Inventory error %v, want %q", err, tt.want)
			}
			// No VM is made without the headroom the Provider means it to have.
			m := newMachine("4b5c6d7e-1c8a-4a52-9a55-0c3c0b1f0a14")
			if _, err := observeCreate(t, s, m); err == nil || err.Error() != tt.want {
				t.Errorf("Create error %v, want %q", err, tt.want)
			}
			for _, vm := range sim.VMs() {
				if !vm.Template {
					t.Errorf("VM %d was made", vm.VMID)
				}
			}
		})
	}
}
