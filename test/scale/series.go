package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gonum.org/v1/plot/plotter"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// sampleEvery is how often the recorder scrapes the processes: fine enough to show a
// run of a minute, coarse enough to cost the machine nothing the figures would show.
const sampleEvery = 2 * time.Second

// sample is what the recorder read at one moment of the run.
type sample struct {
	// at is the time since the first create.
	at time.Duration
	// writes are each client's Kubernetes API writes so far, by process name, the
	// harness's own under harnessName.
	writes map[string]float64
	// rss is each controller process's resident set, in bytes.
	rss map[string]float64
}

// recorder samples the processes in the background while the run goes on.
type recorder struct {
	read     func(context.Context) (sample, error)
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	samples  []sample // appended by the sampling goroutine only, until done is closed
}

// startRecording samples the processes now and every sampleEvery, times counted from
// start, until stop.
func (b *bench) startRecording(ctx context.Context, start time.Time) *recorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{
		read:   func(ctx context.Context) (sample, error) { return b.sample(ctx, start) },
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go r.loop(ctx)
	return r
}

// loop samples every sampleEvery until ctx ends.
func (r *recorder) loop(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	warned := false
	for {
		s, err := r.read(ctx)
		switch {
		case err == nil:
			r.samples = append(r.samples, s)
		case ctx.Err() == nil && !warned:
			// The plot is a view of the run, not one of its figures: a missed sample
			// leaves a longer segment, and the run goes on.
			logf("Warning: a sample for the plot failed (later failures are not logged): %v", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stop ends the sampling, after one last sample so that the series reach the moment of
// the first call, and returns the samples; later calls return them again.
func (r *recorder) stop() []sample {
	r.stopOnce.Do(func() {
		r.cancel()
		<-r.done
		// The sampling context is over; the last sample gets one of its own.
		ctx, cancel := context.WithTimeout(context.Background(), sampleEvery)
		defer cancel()
		if s, err := r.read(ctx); err == nil {
			r.samples = append(r.samples, s)
		}
	})
	return r.samples
}

// sample reads every controller's writes and resident set from its metrics endpoint,
// and the harness's own writes. The processes report their RSS themselves
// (process_resident_memory_bytes, from /proc/self), which saves knowing their PIDs.
func (b *bench) sample(ctx context.Context, start time.Time) (sample, error) {
	s := sample{at: time.Since(start), writes: map[string]float64{}, rss: map[string]float64{}}
	for _, p := range b.processes() {
		families, err := p.Metrics(ctx)
		if err != nil {
			return sample{}, err
		}
		s.writes[p.Name] = sumBy(families["rest_client_requests_total"], "method").sum(writeMethods...)
		rss, ok := gauge(families["process_resident_memory_bytes"])
		if !ok {
			return sample{}, fmt.Errorf("%s reports no process_resident_memory_bytes", p.Name)
		}
		s.rss[p.Name] = rss
	}
	own, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return sample{}, fmt.Errorf("failed to read the harness's own metrics: %w", err)
	}
	for _, f := range own {
		if f.GetName() == "rest_client_requests_total" {
			s.writes[harnessName] = sumBy(f, "method").sum(writeMethods...)
		}
	}
	return s, nil
}

// gauge is the value of a family's first series, which for a process metric is its
// only one.
func gauge(f *dto.MetricFamily) (float64, bool) {
	ms := f.GetMetric()
	if len(ms) == 0 {
		return 0, false
	}
	return ms[0].GetGauge().GetValue(), true
}

// rates turns a counter read at each sample into its rate per second over each interval
// between two samples, placed at the interval's end. value returns false for a sample without the counter, whose two
// intervals are left out. A counter that went down was reset by a restart, so its
// whole value is the interval's increase.
func rates(samples []sample, value func(sample) (float64, bool)) plotter.XYs {
	var xys plotter.XYs
	for i := 1; i < len(samples); i++ {
		prev, okPrev := value(samples[i-1])
		cur, okCur := value(samples[i])
		dt := (samples[i].at - samples[i-1].at).Seconds()
		if !okPrev || !okCur || dt <= 0 {
			continue
		}
		inc := cur - prev
		if inc < 0 {
			inc = cur
		}
		xys = append(xys, plotter.XY{X: samples[i].at.Seconds(), Y: inc / dt})
	}
	return xys
}

// writesOf reads one client's writes from a sample, for rates.
func writesOf(name string) func(sample) (float64, bool) {
	return func(s sample) (float64, bool) {
		v, ok := s.writes[name]
		return v, ok
	}
}

// allWrites reads every client's writes from a sample, added up, for rates.
func allWrites(s sample) (float64, bool) {
	total := 0.0
	for _, v := range s.writes {
		total += v
	}
	return total, len(s.writes) > 0
}

// levels is a gauge read at each sample, in units of scale, at the sample's time;
// samples without it are left out.
func levels(samples []sample, value func(sample) (float64, bool), scale float64) plotter.XYs {
	var xys plotter.XYs
	for _, s := range samples {
		if v, ok := value(s); ok {
			xys = append(xys, plotter.XY{X: s.at.Seconds(), Y: v / scale})
		}
	}
	return xys
}

// rssOf reads one process's resident set from a sample, for levels.
func rssOf(name string) func(sample) (float64, bool) {
	return func(s sample) (float64, bool) {
		v, ok := s.rss[name]
		return v, ok
	}
}

// readyCurves are, for each backend, how many of its VMs were Ready from start until
// end: a point at 0 s, one at each change (to be drawn as a step that holds until the
// next point) and one at end, so that every curve spans the whole run.
func readyCurves(changes []readyChange, start time.Time, end time.Duration) map[string]plotter.XYs {
	sorted := slices.Clone(changes)
	// The watch delivers events in order; sorting makes the curves right regardless.
	slices.SortStableFunc(sorted, func(a, b readyChange) int { return a.at.Compare(b.at) })
	curves, n := map[string]plotter.XYs{}, map[string]int{}
	for _, c := range sorted {
		if _, ok := curves[c.backend]; !ok {
			curves[c.backend] = plotter.XYs{{X: 0, Y: 0}}
		}
		n[c.backend] += c.delta
		x := min(max(c.at.Sub(start), 0), end).Seconds()
		curves[c.backend] = append(curves[c.backend], plotter.XY{X: x, Y: float64(n[c.backend])})
	}
	for be, xys := range curves {
		curves[be] = append(xys, plotter.XY{X: end.Seconds(), Y: float64(n[be])})
	}
	return curves
}
