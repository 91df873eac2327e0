package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/procfs"
	"k8s.io/client-go/kubernetes"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/banlieue/banlieue/test/harness"
)

// harnessName names this process's own requests (the user's creations and deletions,
// its VM watch, the metric scrapes) among the processes'.
const harnessName = "harness (user)"

// writeMethods are the HTTP methods and API server verbs that change objects.
var writeMethods = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// counts are counter values by a label's value (or by a key built from labels).
type counts map[string]float64

// since is c minus before, leaving out keys that did not change.
func (c counts) since(before counts) counts {
	d := counts{}
	for k, v := range c {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

// sum adds up the keys, or every key when none are given.
func (c counts) sum(keys ...string) float64 {
	if len(keys) == 0 {
		keys = slices.Collect(maps.Keys(c))
	}
	total := 0.0
	for _, k := range keys {
		total += c[k]
	}
	return total
}

// snapshot is every counter the report is made of, at one moment.
type snapshot struct {
	at time.Time
	// requests are each process's own Kubernetes API requests by HTTP method
	// (client-go's rest_client_requests_total), the harness's included.
	requests map[string]counts
	// calls are each provider process's backend calls by operation
	// (banlieue_backend_calls_total), by process name; see backendCalls for a
	// backend's.
	calls map[string]counts
	// apiserver are the API server's own counts (apiserver_request_total) by
	// "VERB resource[/subresource]", all clients together.
	apiserver counts
	// usage is each process's CPU time and peak memory so far.
	usage map[string]harness.Usage
	// cpu is the CPU time so far of the processes that are not banlieue's: kube-apiserver
	// and etcd (each one's own process_cpu_seconds_total), and the harness itself (the
	// simulators and the VM watch).
	cpu map[string]time.Duration
	// steal is the time the hypervisor ran something else while the machine's cores had
	// work (/proc/stat's steal, all cores added up), zero where the kernel does not
	// count it.
	steal time.Duration
}

// Names of the processes that are not banlieue's, in snapshot.cpu.
const (
	apiserverName = "kube-apiserver"
	etcdName      = "etcd"
)

// snapshot scrapes every process, this one and the API server.
func (b *bench) snapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{at: time.Now(), requests: map[string]counts{}, calls: map[string]counts{}, usage: map[string]harness.Usage{},
		cpu: map[string]time.Duration{harnessName: selfUsage().CPU}, steal: machineSteal()}
	for _, p := range b.processes() {
		families, err := p.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		s.requests[p.Name] = sumBy(families["rest_client_requests_total"], "method")
		// Core has no backend calls: its counts stay empty.
		s.calls[p.Name] = sumBy(families["banlieue_backend_calls_total"], "operation")
		if u, err := p.Usage(); err == nil {
			s.usage[p.Name] = u
		}
	}
	own, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("failed to read the harness's own metrics: %w", err)
	}
	for _, f := range own {
		if f.GetName() == "rest_client_requests_total" {
			s.requests[harnessName] = sumBy(f, "method")
		}
	}
	cs, err := kubernetes.NewForConfig(b.env.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to scrape the API server: %w", err)
	}
	families, err := harness.ParseMetrics(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("failed to parse the API server's metrics: %w", err)
	}
	s.cpu[apiserverName] = processCPU(families)
	etcd, err := harness.Scrape(ctx, b.env.EtcdURL().JoinPath("metrics").String())
	if err != nil {
		return nil, fmt.Errorf("failed to scrape etcd: %w", err)
	}
	s.cpu[etcdName] = processCPU(etcd)
	s.apiserver = counts{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		key := harness.Label(m, "verb") + " " + harness.Label(m, "resource")
		if sub := harness.Label(m, "subresource"); sub != "" {
			key += "/" + sub
		}
		s.apiserver[key] += m.GetCounter().GetValue()
	}
	return s, nil
}

// backendCalls are the backend calls of all the backend's provider processes, added
// up by operation.
func (s *snapshot) backendCalls(be *backend) counts {
	c := counts{}
	for _, sh := range be.shards {
		for op, v := range s.calls[sh.proc.Name] {
			c[op] += v
		}
	}
	return c
}

// processCPU is a process's own process_cpu_seconds_total, or 0 when it exports none.
func processCPU(families map[string]*dto.MetricFamily) time.Duration {
	for _, m := range families["process_cpu_seconds_total"].GetMetric() {
		return time.Duration(m.GetCounter().GetValue() * float64(time.Second))
	}
	return 0
}

// sumBy adds up a counter family's series by the value of one label.
func sumBy(f *dto.MetricFamily, name string) counts {
	c := counts{}
	for _, m := range f.GetMetric() {
		c[harness.Label(m, name)] += m.GetCounter().GetValue()
	}
	return c
}

// selfUsage is this process's own CPU time (user and system) and peak resident set:
// the harness's, which holds the simulators and the VM watch.
// machineSteal is the machine's steal time so far, or zero when /proc/stat cannot be
// read: the report then says no time was taken rather than failing the run.
func machineSteal() time.Duration {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	st, err := fs.Stat()
	if err != nil {
		return 0
	}
	return time.Duration(st.CPUTotal.Steal * float64(time.Second))
}

func selfUsage() harness.Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return harness.Usage{}
	}
	return harness.Usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), PeakRSS: uint64(ru.Maxrss) * 1024}
}
