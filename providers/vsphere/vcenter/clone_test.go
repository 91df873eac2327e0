package vcenter

import (
	"testing"

	"github.com/vmware/govmomi/vim25/types"
)

func TestTheCloneConfigTurnsHotAddOnOnlyWhenAsked(t *testing.T) {
	for _, tt := range []struct {
		name                string
		req                 CloneRequest
		wantCPU, wantMemory *bool
	}{
		{name: "by default the template's settings stay", req: CloneRequest{CPUs: 2}},
		{name: "CPU hot-add", req: CloneRequest{CPUHotAdd: true}, wantCPU: types.NewBool(true)},
		{name: "both", req: CloneRequest{CPUHotAdd: true, MemoryHotAdd: true}, wantCPU: types.NewBool(true), wantMemory: types.NewBool(true)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cloneConfig(tt.req)
			if !equalBool(cfg.CpuHotAddEnabled, tt.wantCPU) || !equalBool(cfg.MemoryHotAddEnabled, tt.wantMemory) {
				t.Errorf("hot-add CPU %v, memory %v; want %v, %v", cfg.CpuHotAddEnabled, cfg.MemoryHotAddEnabled, tt.wantCPU, tt.wantMemory)
			}
		})
	}
}

// equalBool compares two optional booleans: both unset, or both set and equal.
func equalBool(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
