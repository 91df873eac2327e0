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

// TestTheCPUSectionBoundsTheRatioByWhatTheControllersCannotChange: kube-apiserver's,
// etcd's and the harness's CPU over the cores is the least time the run could have
// taken, and the section says it as a ratio to the direct path, with the hypervisor's
// steal in the same window.
func TestTheCPUSectionBoundsTheRatioByWhatTheControllersCannotChange(t *testing.T) {
	start := time.Now()
	b := &bench{
		machine: machine{cores: 2},
		before: &snapshot{at: start, steal: time.Second,
			cpu: map[string]time.Duration{apiserverName: 10 * time.Second, etcdName: time.Second, harnessName: 2 * time.Second}},
		ready: &snapshot{at: start.Add(50 * time.Second), steal: 4 * time.Second,
			cpu: map[string]time.Duration{apiserverName: 60 * time.Second, etcdName: 5 * time.Second, harnessName: 18 * time.Second}},
		direct: 25 * time.Second,
	}
	var w strings.Builder
	b.reportCPU(&w)
	for _, want := range []string{
		"| all | 70.0 | 70% |",
		"something else for 3.0 CPU s",
		// (50 + 4 + 16) CPU s over 2 cores is 35 s: 1.40 times the direct path's 25 s.
		"alone used 70.0 CPU s: 35.0 s of the cores at full use, 1.40× the direct path",
	} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("the CPU section lacks %q:\n%s", want, w.String())
		}
	}
}
