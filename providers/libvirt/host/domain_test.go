package host

import (
	"fmt"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"libvirt.org/go/libvirtxml"
)

// TestPausedInTransit separates the pauses libvirt ends by itself from the ones that
// stay until someone acts: a guest crash or an I/O error is never waited for.
func TestPausedInTransit(t *testing.T) {
	for _, tc := range []struct {
		reason libvirt.DomainPausedReason
		want   bool
	}{
		{libvirt.DomainPausedStartingUp, true},
		{libvirt.DomainPausedMigration, true},
		{libvirt.DomainPausedSave, true},
		{libvirt.DomainPausedDump, true},
		{libvirt.DomainPausedSnapshot, true},
		{libvirt.DomainPausedShuttingDown, true},
		{libvirt.DomainPausedPostcopy, true},
		{libvirt.DomainPausedUnknown, false},
		{libvirt.DomainPausedUser, false},
		{libvirt.DomainPausedIoerror, false},
		{libvirt.DomainPausedWatchdog, false},
		{libvirt.DomainPausedCrashed, false},
		{libvirt.DomainPausedPostcopyFailed, false},
		{libvirt.DomainPausedAPIError, false},
		{libvirt.DomainPausedFromSnapshot, false},
	} {
		if got := pausedInTransit(tc.reason); got != tc.want {
			t.Errorf("pausedInTransit(%d) = %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// TestReshapeMemory covers how a shut-off domain's definition takes new memory: the
// DIMMs plugged while it ran fold into its one NUMA cell, and another tool's topology
// of several cells is left alone.
func TestReshapeMemory(t *testing.T) {
	cell := func(cpus string, kib uint) libvirtxml.DomainCell {
		return libvirtxml.DomainCell{ID: new(uint), CPUs: cpus, Memory: kib, Unit: "KiB"}
	}
	dimm := libvirtxml.DomainMemorydev{Model: "dimm", Target: &libvirtxml.DomainMemorydevTarget{Size: &libvirtxml.DomainMemorydevTargetSize{Value: 256 << 10, Unit: "KiB"}}}
	nvdimm := libvirtxml.DomainMemorydev{Model: "nvdimm"}
	tests := []struct {
		name string
		def  libvirtxml.Domain
		r    Reshape
		want shape
	}{
		{
			name: "no hotplug: the memory only",
			def:  libvirtxml.Domain{VCPU: &libvirtxml.DomainVCPU{Value: 2}},
			r:    Reshape{CPUs: 2, MemoryMiB: 512},
			want: shape{Memory: "512 MiB", VCPU: "static 2/2"},
		},
		{
			name: "hotplug: the DIMMs fold into the cell, which follows the new maximum of CPUs",
			def: libvirtxml.Domain{
				VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Current: 3, Value: 4},
				MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 1 << 20, Unit: "KiB", Slots: 16},
				CPU:           &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{cell("0-3", 256<<10)}}},
				Devices:       &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{dimm, dimm, nvdimm}},
			},
			r:    Reshape{CPUs: 5, MaxCPUs: 20, MemoryMiB: 768, MaxMemoryMiB: 3072, MemorySlots: 8},
			want: shape{Memory: "768 MiB", VCPU: "static 5/20", MaxMemory: "3145728 KiB, 16 slots", Cells: []string{"0-19: 786432 KiB"}, Devices: []string{"nvdimm"}},
		},
		{
			name: "hotplug given to a domain without: a cell and maxMemory",
			def:  libvirtxml.Domain{VCPU: &libvirtxml.DomainVCPU{Value: 1}},
			r:    Reshape{CPUs: 1, MaxCPUs: 4, MemoryMiB: 256, MaxMemoryMiB: 1024, MemorySlots: 16},
			want: shape{Memory: "256 MiB", VCPU: "static 1/4", MaxMemory: "1048576 KiB, 16 slots", Cells: []string{"0-3: 262144 KiB"}},
		},
		{
			name: "hotplug up to the memory itself: no maxMemory, which QEMU would refuse without room",
			def: libvirtxml.Domain{
				VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Current: 2, Value: 3},
				MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 2 << 20, Unit: "KiB", Slots: 16},
				CPU:           &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{cell("0-2", 1536<<10)}}},
				Devices:       &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{dimm, dimm}},
			},
			r:    Reshape{CPUs: 4, MaxCPUs: 4, MemoryMiB: 2048, MaxMemoryMiB: 2048, MemorySlots: 16},
			want: shape{Memory: "2048 MiB", VCPU: "static 4/4", Cells: []string{"0-3: 2097152 KiB"}},
		},
		{
			name: "a maxMemory without hotplug stays above the memory",
			def:  libvirtxml.Domain{VCPU: &libvirtxml.DomainVCPU{Value: 1}, MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 2048, Unit: "MiB", Slots: 4}},
			r:    Reshape{CPUs: 1, MemoryMiB: 1024},
			want: shape{Memory: "1024 MiB", VCPU: "static 1/1", MaxMemory: "2097152 KiB, 4 slots"},
		},
		{
			name: "a maxMemory the memory reaches goes",
			def:  libvirtxml.Domain{VCPU: &libvirtxml.DomainVCPU{Value: 1}, MaximumMemory: &libvirtxml.DomainMaxMemory{Value: 512, Unit: "MiB", Slots: 4}},
			r:    Reshape{CPUs: 1, MemoryMiB: 1024},
			want: shape{Memory: "1024 MiB", VCPU: "static 1/1"},
		},
		{
			name: "several NUMA cells are another tool's: left alone, DIMMs too",
			def: libvirtxml.Domain{
				VCPU:    &libvirtxml.DomainVCPU{Value: 2},
				CPU:     &libvirtxml.DomainCPU{Numa: &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{cell("0", 256<<10), cell("1", 256<<10)}}},
				Devices: &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{dimm}},
			},
			r:    Reshape{CPUs: 2, MemoryMiB: 1024},
			want: shape{Memory: "1024 MiB", VCPU: "static 2/2", Cells: []string{"0: 262144 KiB", "1: 262144 KiB"}, Devices: []string{"dimm"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := tt.def
			if def.Devices == nil {
				def.Devices = &libvirtxml.DomainDeviceList{}
			}
			def.VCPU = vcpu(def.VCPU, tt.r.CPUs, tt.r.MaxCPUs)
			reshapeMemory(&def, tt.r)
			if diff := cmp.Diff(tt.want, shapeOf(&def)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// shape is what reshapeMemory and vcpu change in a definition, for cmp.Diff.
type shape struct {
	Memory, VCPU, MaxMemory string
	Cells, Devices          []string
}

// shapeOf reads d's shape.
func shapeOf(d *libvirtxml.Domain) shape {
	current := d.VCPU.Current
	if current == 0 {
		current = d.VCPU.Value
	}
	s := shape{
		Memory: fmt.Sprintf("%d %s", d.Memory.Value, d.Memory.Unit),
		VCPU:   fmt.Sprintf("%s %d/%d", d.VCPU.Placement, current, d.VCPU.Value),
	}
	if mm := d.MaximumMemory; mm != nil {
		s.MaxMemory = fmt.Sprintf("%d %s, %d slots", mm.Value, mm.Unit, mm.Slots)
	}
	if d.CPU != nil && d.CPU.Numa != nil {
		for _, c := range d.CPU.Numa.Cell {
			s.Cells = append(s.Cells, fmt.Sprintf("%s: %d %s", c.CPUs, c.Memory, c.Unit))
		}
	}
	for _, m := range d.Devices.Memorydevs {
		s.Devices = append(s.Devices, m.Model)
	}
	return s
}
