package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg/draw"
)

func TestPlotPathIsBesideTheReport(t *testing.T) {
	for _, tt := range []struct {
		name, out, dir, want string
	}{
		{"no report file: the run's folder", "", "/tmp/run", "/tmp/run/scale.png"},
		{"the report's extension replaced", "/tmp/scale-30.md", "/tmp/run", "/tmp/scale-30.png"},
		{"a report without extension", "bench/report", "/tmp/run", "bench/report.png"},
		{"only the last extension", "scale.v2.md", "", "scale.v2.png"},
		{"a report named .png keeps it", "r.PNG", "", "r.PNG.png"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := plotPath(tt.out, tt.dir); got != tt.want {
				t.Errorf("plotPath(%q, %q) = %q, want %q", tt.out, tt.dir, got, tt.want)
			}
		})
	}
}

// TestDrawPlotWritesAPNG draws a small made-up run: what it checks is that drawing
// goes through and yields a PNG; how the plot looks is for a person to judge.
func TestDrawPlotWritesAPNG(t *testing.T) {
	// Two shards of provider x, the second dashed, as a sharded run draws them.
	clients := []string{"controller", "provider-x-0", "provider-x-1", harnessName}
	samples := make([]sample, 0, 5)
	for i := range cap(samples) {
		v := float64(i)
		samples = append(samples, sample{
			at:     time.Duration(i) * sampleEvery,
			writes: map[string]float64{"controller": 3 * v, "provider-x-0": v, "provider-x-1": v / 2, harnessName: 2 * v},
			rss:    map[string]float64{"controller": (40 + v) * mib, "provider-x-0": 30 * mib, "provider-x-1": 25 * mib},
		})
	}
	tl := timeline{
		title:    "test",
		ready:    map[string]plotter.XYs{"x": {{X: 0, Y: 0}, {X: 3, Y: 2}, {X: 7, Y: 0}, {X: 8, Y: 0}}},
		backends: []string{"x", "without VMs"},
		samples:  samples,
		styles: map[string]draw.LineStyle{
			"x": {Color: backendColors[0]}, "provider-x-0": {Color: backendColors[0]}, "provider-x-1": {Color: backendColors[0], Dashes: plotutil.Dashes(1)},
			"controller": {Color: coreColor}, harnessName: {Color: harnessColor},
		},
		processes: clients[:3],
		clients:   clients,
		marks:     []phaseMark{{at: 3, name: "all Ready", right: true}, {at: 6, name: "delete"}, {at: 99, name: "off the axis"}},
		end:       8,
	}
	path := filepath.Join(t.TempDir(), "scale.png")
	// SCALE_TEST_PLOT=FILE keeps the drawing, for a person to look at.
	if p := os.Getenv("SCALE_TEST_PLOT"); p != "" {
		path = p
	}
	if err := drawPlot(path, tl); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("not a PNG: %v", err)
	}
}
