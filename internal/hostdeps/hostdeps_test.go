package hostdeps

import (
	"testing"
)

// recorder is a testing.TB that records whether Require skipped or failed it.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()      {}
func (r *recorder) Skip(...any)  { r.skipped = true }
func (r *recorder) Fatal(...any) { r.failed = true }

func TestRequireSkipsOutsideCIAndFailsInCI(t *testing.T) {
	tests := []struct {
		name, ci, missing    string
		wantSkip, wantFailed bool
	}{
		{name: "nothing missing passes outside CI", ci: "", missing: ""},
		{name: "nothing missing passes in CI", ci: "true", missing: ""},
		{name: "a missing tool skips outside CI", ci: "", missing: "python3-proxmoxer", wantSkip: true},
		{name: "a missing tool fails in CI", ci: "true", missing: "python3-proxmoxer", wantFailed: true},
		{name: "CI set to anything else is not CI", ci: "1", missing: "python3-proxmoxer", wantSkip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recorder{TB: t}
			Require(r, tt.missing)
			if r.skipped != tt.wantSkip || r.failed != tt.wantFailed {
				t.Errorf("Require(%q) with CI=%q: skipped %v, failed %v; want %v, %v", tt.missing, tt.ci, r.skipped, r.failed, tt.wantSkip, tt.wantFailed)
			}
		})
	}
}
