package main

import (
	"strings"
	"testing"
	"time"

	"github.com/banlieue/banlieue/test/harness"
)

// TestProcessCPUIsTheProcessOwnCounter reads the CPU time kube-apiserver and etcd report
// of themselves, the figure the report's CPU table is made of.
func TestProcessCPUIsTheProcessOwnCounter(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       time.Duration
	}{
		{
			name: "exported",
			text: "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 43.25\n# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\"} 7\n",
			want: 43250 * time.Millisecond,
		},
		{
			name: "not exported",
			text: "# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\"} 7\n",
			want: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			families, err := harness.ParseMetrics(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if got := processCPU(families); got != tc.want {
				t.Errorf("processCPU = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestSelfCPUGrowsWithWork reads the harness's own CPU time, which holds the simulators':
// work done shows in it (however slowly a loaded machine gives the work CPU).
func TestSelfCPUGrowsWithWork(t *testing.T) {
	before := selfUsage().CPU
	deadline := time.Now().Add(time.Minute)
	for n := 0; selfUsage().CPU <= before; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("the harness's CPU time stayed at %s through a minute of work", before)
		}
		_ = strings.Repeat("x", n%64)
	}
}
