package libvirt

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"libvirt.org/go/libvirtxml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// TestARunningDomainWithHotplugGrowsWithoutARestart grows the CPUs and memory of a
// running domain made with hotplug cpu,memory up to its maxima, in the same boot, with
// virsh as the outside witness; beyond the maxima, and down, the changes wait for the
// next power cycle, which sets the maxima again for the new size.
func TestARunningDomainWithHotplugGrowsWithoutARestart(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), map[string]string{providersdk.ParamHotplug: "cpu,memory"}, WithShutdownTimeout(time.Second))
	m := machine("grows") // 1 CPU, 256 MiB: at most 4 CPUs and 1024 MiB
	if err := createMachine(ctx, s, m); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = deleteMachine(context.Background(), s, m) })
	name := domainName(m.Namespace, m.Name)
	if _, err := updateMachine(ctx, s, m); err != nil { // the boot ID
		t.Fatal(err)
	}
	first := mustObserve(t, s, m)
	domID := mustVirsh(t, d, "domid", name)

	t.Run("the domain is defined with its maxima and one NUMA cell", func(t *testing.T) {
		x := inactiveXML(t, d, name)
		got := hotplugShape(x)
		want := shape{VCPU: "static 1/4", MaxMemoryKiB: 1 << 20, Slots: memorySlots, Cells: "0-3:262144", DIMMKiB: nil}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("definition (-want +got):\n%s", diff)
		}
		if mark := metadataOf(t, x); mark == nil || !cmp.Equal(mark.Hotplug, []string{"cpu", "memory"}) {
			t.Errorf("banlieue's metadata %+v records no hotplug cpu and memory", mark)
		}
	})

	t.Run("CPUs and memory grow at once, in the same boot", func(t *testing.T) {
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 3, 512
		o := mustObserve(t, s, m)
		if o.UpToDate || len(o.PendingRestart) > 0 {
			t.Fatalf("up to date %v, pending %q; want a change to make now", o.UpToDate, o.PendingRestart)
		}
		for range 2 { // the second finds the domain grown: no second DIMM
			if _, err := updateMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
		}
		o = mustObserve(t, s, m)
		if !o.UpToDate || len(o.PendingRestart) > 0 || o.BootID != first.BootID ||
			!cmp.Equal(o.Hardware, &providersdk.Hardware{CPUs: 3, MemoryMiB: 512, DiskBytes: []int64{2 * providersdk.GiB}}) {
			t.Errorf("after the update: up to date %v, pending %q, boot %q (was %q), hardware %+v; want 3 CPUs and 512 MiB in the same boot",
				o.UpToDate, o.PendingRestart, o.BootID, first.BootID, o.Hardware)
		}
		if got := mustVirsh(t, d, "domid", name); got != domID {
			t.Errorf("domain ID %s, was %s: the domain was restarted", got, domID)
		}
		wantCount := map[string]string{"--live --active": "3", "--live --maximum": "4", "--config --active": "3", "--config --maximum": "4"}
		for flags, want := range wantCount {
			if got := mustVirsh(t, d, append([]string{"vcpucount", name}, strings.Fields(flags)...)...); got != want {
				t.Errorf("virsh vcpucount %s = %q, want %s", flags, got, want)
			}
		}
		info := mustVirsh(t, d, "dominfo", name)
		for _, re := range []string{`CPU\(s\):\s+3\n`, `Max memory:\s+524288 KiB`, `State:\s+running`} {
			if !regexp.MustCompile(re).MatchString(info) {
				t.Errorf("virsh dominfo does not match %s:\n%s", re, info)
			}
		}
		for part, x := range map[string]*libvirtxml.Domain{"live": liveXML(t, d, name), "persistent": inactiveXML(t, d, name)} {
			if got := hotplugShape(x).DIMMKiB; !cmp.Equal(got, []uint{256 << 10}) {
				t.Errorf("the %s definition's DIMMs are %v KiB, want one of 256 MiB", part, got)
			}
		}
	})

	t.Run("beyond the maxima, and down, changes wait for the next power cycle", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			cpus      int32
			memoryMiB int64
			pending   []string
		}{
			{"more CPUs than the maximum", 5, 512, []string{"CPUs from 3 to 5"}},
			{"more memory than the maximum", 3, 1280, []string{"memory from 512 MiB to 1280 MiB"}},
			{"fewer CPUs", 2, 512, []string{"CPUs from 3 to 2"}},
			{"less memory", 3, 384, []string{"memory from 512 MiB to 384 MiB"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = tt.cpus, tt.memoryMiB
				o := mustObserve(t, s, m)
				if !o.UpToDate || !cmp.Equal(o.PendingRestart, tt.pending) {
					t.Fatalf("up to date %v, pending %q; want up to date with %q pending", o.UpToDate, o.PendingRestart, tt.pending)
				}
				if _, err := s.Update(ctx, m, o); err != nil {
					t.Fatal(err)
				}
				if o := mustObserve(t, s, m); o.Hardware.CPUs != 3 || o.Hardware.MemoryMiB != 512 || o.BootID != first.BootID {
					t.Errorf("after the update: hardware %+v, boot %q; want the running domain unchanged", o.Hardware, o.BootID)
				}
			})
		}
	})

	t.Run("a power cycle applies the growth and sets the maxima for the new size", func(t *testing.T) {
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 5, 1280
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		powerTo(t, s, m, banlieuev1.PowerStatePoweredOff) // the blank guest ignores the power button: destroyed after 1 s
		got := hotplugShape(inactiveXML(t, d, name))
		// 5 CPUs and 1280 MiB: at most 20 CPUs and 5120 MiB; the DIMM folded into the cell.
		want := shape{VCPU: "static 5/20", MaxMemoryKiB: 5120 << 10, Slots: memorySlots, Cells: "0-19:1310720", DIMMKiB: nil}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("definition after the power cycle (-want +got):\n%s", diff)
		}
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		o := powerTo(t, s, m, banlieuev1.PowerStatePoweredOn)
		if !o.UpToDate || len(o.PendingRestart) > 0 || o.Hardware.CPUs != 5 || o.Hardware.MemoryMiB != 1280 {
			t.Errorf("after the power cycle: up to date %v, pending %q, hardware %+v", o.UpToDate, o.PendingRestart, o.Hardware)
		}
		if info := mustVirsh(t, d, "dominfo", name); !regexp.MustCompile(`CPU\(s\):\s+5\n`).MatchString(info) {
			t.Errorf("virsh dominfo:\n%s", info)
		}
	})
}

// TestADomainGrownToItsMaximaStartsAgain grows a running domain to the Provider's
// maxima, then beyond them at a power cycle: the memory at its maximum leaves no room
// for DIMMs, so the domain is defined without <maxMemory> (QEMU refuses slots without
// room) and starts with its pending CPU.
func TestADomainGrownToItsMaximaStartsAgain(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), map[string]string{providersdk.ParamHotplug: "cpu,memory",
		providersdk.ParamMaxCPUs: "2", providersdk.ParamMaxMemoryMiB: "512"}, WithShutdownTimeout(time.Second))
	m := machine("at-maxima")
	if err := createMachine(ctx, s, m); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = deleteMachine(context.Background(), s, m) })
	name := domainName(m.Namespace, m.Name)
	m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 2, 512
	if o := powerTo(t, s, m, banlieuev1.PowerStatePoweredOn); len(o.PendingRestart) > 0 || o.Hardware.CPUs != 2 || o.Hardware.MemoryMiB != 512 {
		t.Fatalf("at the maxima: pending %q, hardware %+v; want 2 CPUs and 512 MiB at once", o.PendingRestart, o.Hardware)
	}
	m.Spec.Hardware.CPUs = 3
	if o := mustObserve(t, s, m); !cmp.Equal(o.PendingRestart, []string{"CPUs from 2 to 3"}) {
		t.Fatalf("pending %q, want the third CPU", o.PendingRestart)
	}
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	powerTo(t, s, m, banlieuev1.PowerStatePoweredOff)
	want := shape{VCPU: "static 3/3", Cells: "0-2:524288"}
	if diff := cmp.Diff(want, hotplugShape(inactiveXML(t, d, name))); diff != "" {
		t.Errorf("definition after the power cycle (-want +got):\n%s", diff)
	}
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
	if o := powerTo(t, s, m, banlieuev1.PowerStatePoweredOn); len(o.PendingRestart) > 0 || o.Hardware.CPUs != 3 || o.Hardware.MemoryMiB != 512 {
		t.Errorf("after the power cycle: pending %q, hardware %+v; want 3 CPUs and 512 MiB", o.PendingRestart, o.Hardware)
	}
}

// TestWhatGrowsOnlineFollowsTheProvidersHotplug creates a running domain per value of
// the Provider's hotplug parameter and grows its CPUs and memory: what the parameter
// does not name waits for the next power cycle, as every change did before it.
func TestWhatGrowsOnlineFollowsTheProvidersHotplug(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	tests := []struct {
		name    string
		hotplug string
		pending []string
		want    providersdk.Hardware
	}{
		{"no hotplug: both wait", "", []string{"CPUs from 1 to 2", "memory from 256 MiB to 384 MiB"}, providersdk.Hardware{CPUs: 1, MemoryMiB: 256}},
		{"CPU hotplug: the memory waits", "cpu", []string{"memory from 256 MiB to 384 MiB"}, providersdk.Hardware{CPUs: 2, MemoryMiB: 256}},
		{"memory hotplug: the CPUs wait", "memory", []string{"CPUs from 1 to 2"}, providersdk.Hardware{CPUs: 1, MemoryMiB: 384}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := connect(t, d.QEMUURI(), map[string]string{providersdk.ParamHotplug: tt.hotplug})
			m := machine("kinds-" + string(rune('a'+i)))
			if err := createMachine(ctx, s, m); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = deleteMachine(context.Background(), s, m) })
			if _, err := updateMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			domID := mustVirsh(t, d, "domid", domainName(m.Namespace, m.Name))
			m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 2, 384
			if o := mustObserve(t, s, m); !cmp.Equal(o.PendingRestart, tt.pending) {
				t.Errorf("before the update: pending %q, want %q", o.PendingRestart, tt.pending)
			}
			if _, err := updateMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			o := mustObserve(t, s, m)
			tt.want.DiskBytes = []int64{2 * providersdk.GiB}
			if !o.UpToDate || !cmp.Equal(o.PendingRestart, tt.pending) || !cmp.Equal(o.Hardware, &tt.want) {
				t.Errorf("after the update: up to date %v, pending %q, hardware %+v; want up to date, %q pending and %+v",
					o.UpToDate, o.PendingRestart, o.Hardware, tt.pending, tt.want)
			}
			if got := mustVirsh(t, d, "domid", domainName(m.Namespace, m.Name)); got != domID {
				t.Errorf("domain ID %s, was %s: the domain was restarted", got, domID)
			}
		})
	}
}

// TestOnlineChange covers what a running domain's hotplug allows beyond what the
// domains above reach: the slots, the DIMM alignment, a domain that is not running.
func TestOnlineChange(t *testing.T) {
	running := host.Domain{State: host.StateRunning, Arch: "x86_64", CPUs: 2, MaxCPUs: 8, MemoryMiB: 1024,
		MaxMemoryMiB: 4096, MemorySlots: 16, NUMACells: 1}
	cpus := func(to int64) providersdk.HardwareChange {
		return providersdk.HardwareChange{Kind: providersdk.ChangeCPUs, Disk: -1, From: 2, To: to}
	}
	memory := func(to int64) providersdk.HardwareChange {
		return providersdk.HardwareChange{Kind: providersdk.ChangeMemory, Disk: -1, From: 1024, To: to}
	}
	tests := []struct {
		name   string
		dom    func(*host.Domain)
		change providersdk.HardwareChange
		want   bool
	}{
		{name: "CPUs up to the maximum", change: cpus(8), want: true},
		{name: "CPUs beyond the maximum", change: cpus(9)},
		{name: "fewer CPUs", change: cpus(1)},
		{name: "memory up to the maximum", change: memory(4096), want: true},
		{name: "memory beyond the maximum", change: memory(4098)},
		{name: "less memory", change: memory(512)},
		{name: "memory by an odd MiB, which QEMU refuses for a DIMM", change: memory(1025)},
		{name: "memory with every slot taken", dom: func(d *host.Domain) { d.MemoryDevices = 16 }, change: memory(2048)},
		{name: "memory without a NUMA cell", dom: func(d *host.Domain) { d.NUMACells = 0 }, change: memory(2048)},
		{name: "memory without maxMemory", dom: func(d *host.Domain) { d.MaxMemoryMiB, d.MemorySlots = 0, 0 }, change: memory(2048)},
		{name: "CPUs of a paused domain", dom: func(d *host.Domain) { d.State = host.StatePaused }, change: cpus(4)},
		{name: "CPUs of a shut-off domain", dom: func(d *host.Domain) { d.State = host.StateShutoff }, change: cpus(4)},
		{name: "a disk grows", change: providersdk.HardwareChange{Kind: providersdk.ChangeDiskGrow, From: 1, To: 2}, want: true},
		{name: "a disk is added", change: providersdk.HardwareChange{Kind: providersdk.ChangeDiskAdd, To: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dom := running
			if tt.dom != nil {
				tt.dom(&dom)
			}
			if got := onlineChange(&dom, tt.change); got != tt.want {
				t.Errorf("onlineChange(%s) = %v, want %v", tt.change, got, tt.want)
			}
		})
	}
}

func TestABadHotplugParameterKeepsTheProviderFromReady(t *testing.T) {
	d := daemon(t)
	for _, tt := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"maxCPUs is not a number", map[string]string{providersdk.ParamHotplug: "cpu", providersdk.ParamMaxCPUs: "lots"},
			`parameters.maxCPUs "lots" is not a whole number from 1 to 1024; set it in the Provider, or remove it for the default`},
		{"hotplug names neither cpu nor memory", map[string]string{providersdk.ParamHotplug: "cpus"},
			`parameters.hotplug "cpus": "cpus" is neither cpu nor memory; list what may grow while a VM runs, e.g. cpu,memory, in the Provider`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := connect(t, d.QEMUURI(), tt.params)
			if _, err := s.Inventory(t.Context()); err == nil || err.Error() != tt.want {
				t.Errorf("Inventory error %v, want %q", err, tt.want)
			}
			// A machine is not created without the headroom the Provider means to give.
			m := machine("no-headroom")
			if _, err := s.Create(t.Context(), m, providersdk.Observation{}); err == nil || !strings.Contains(err.Error(), tt.want) || providersdk.IsPermanent(err) {
				t.Errorf("Create error %v, want a retried one with %q", err, tt.want)
			}
			inspect(t, d, func(l *libvirt.Libvirt) {
				if n := domainsNamed(t, l, domainName(m.Namespace, m.Name)); n != 0 {
					t.Errorf("%d domains made", n)
				}
			})
		})
	}
}

// shape is what hotplug puts into a domain's definition, for cmp.Diff.
type shape struct {
	// VCPU is "<placement> <current>/<maximum>".
	VCPU string
	// MaxMemoryKiB and Slots are <maxMemory>'s.
	MaxMemoryKiB, Slots uint
	// Cells are the NUMA cells, "<cpus>:<KiB>" each, space-separated.
	Cells string
	// DIMMKiB are the sizes of the DIMMs.
	DIMMKiB []uint
}

// hotplugShape reads x's shape, with sizes in KiB as libvirt writes them.
func hotplugShape(x *libvirtxml.Domain) shape {
	var s shape
	if v := x.VCPU; v != nil {
		current := v.Current
		if current == 0 {
			current = v.Value
		}
		s.VCPU = fmt.Sprintf("%s %d/%d", v.Placement, current, v.Value)
	}
	if mm := x.MaximumMemory; mm != nil {
		s.MaxMemoryKiB, s.Slots = mm.Value, mm.Slots
	}
	if x.CPU != nil && x.CPU.Numa != nil {
		cells := make([]string, 0, len(x.CPU.Numa.Cell))
		for _, c := range x.CPU.Numa.Cell {
			cells = append(cells, fmt.Sprintf("%s:%d", c.CPUs, c.Memory))
		}
		s.Cells = strings.Join(cells, " ")
	}
	if x.Devices != nil {
		for _, md := range x.Devices.Memorydevs {
			if md.Target != nil && md.Target.Size != nil {
				s.DIMMKiB = append(s.DIMMKiB, md.Target.Size.Value)
			}
		}
	}
	return s
}

// liveXML reads the running definition of the domain name through virsh.
func liveXML(t *testing.T, d *libvirtd.Daemon, name string) *libvirtxml.Domain {
	t.Helper()
	return virshXML(t, d, name)
}

// inactiveXML reads the persistent definition.
func inactiveXML(t *testing.T, d *libvirtd.Daemon, name string) *libvirtxml.Domain {
	t.Helper()
	return virshXML(t, d, name, "--inactive")
}

// virshXML reads virsh's dumpxml of the domain name with flags.
func virshXML(t *testing.T, d *libvirtd.Daemon, name string, flags ...string) *libvirtxml.Domain {
	t.Helper()
	x := &libvirtxml.Domain{}
	if err := x.Unmarshal(mustVirsh(t, d, append([]string{"dumpxml", name}, flags...)...)); err != nil {
		t.Fatal(err)
	}
	return x
}

// powerTo updates m, as the reconciler would, until its domain is in state want and up
// to date (a shut-off domain reshaped, a running one with its boot ID), and returns
// the last observation.
func powerTo(t *testing.T, s *session, m *providersdk.Machine, want banlieuev1.PowerState) providersdk.Observation {
	t.Helper()
	var o providersdk.Observation
	eventually(t, time.Minute, func() error {
		res, err := updateMachine(t.Context(), s, m)
		if err != nil {
			return err
		}
		switch {
		case res.Task.Ref == "":
			m.Task = providersdk.Task{}
		case res.Task.Ref != m.Task.Ref: // a shutdown, timed from now
			m.Task = res.Task
			m.Task.StartedAt = time.Now()
		}
		o = mustObserve(t, s, m)
		if o.PowerState != want || !o.UpToDate {
			return fmt.Errorf("power %s, want %s; up to date %v", o.PowerState, want, o.UpToDate)
		}
		return nil
	})
	m.Task = providersdk.Task{}
	return mustObserve(t, s, m)
}
