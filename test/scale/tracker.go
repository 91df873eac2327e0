package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// tracker follows the VirtualMachines through one watch, so that waiting for thousands
// of them costs the API server nothing but that watch.
type tracker struct {
	mu      sync.Mutex
	backend map[string]string    // VM key → its backend label, for every VM that exists
	seen    map[string]time.Time // VM key → its creation (see stamp)
	ready   map[string]time.Time // VM key → when it first became Ready (see stamp)
	// readyNow holds the VMs whose last version in the watch is Ready, and changes
	// every time one enters or leaves that set, so that the plot can draw how many
	// were Ready at each moment, deletions included.
	readyNow map[string]bool
	changes  []readyChange
	// placed is the Provider ("namespace/name") each VM was placed on, from its
	// status.scheduled; kept after the VM is deleted.
	placed map[string]string
}

// readyChange is one VM of a backend becoming Ready (+1), or ceasing to be Ready or
// to exist while Ready (-1).
type readyChange struct {
	at      time.Time
	backend string
	delta   int
}

// newTracker returns a tracker that has seen no VM.
func newTracker() *tracker {
	return &tracker{backend: map[string]string{}, seen: map[string]time.Time{}, ready: map[string]time.Time{}, readyNow: map[string]bool{}, placed: map[string]string{}}
}

// startTracker starts an informer on the VirtualMachines of every namespace: the run's
// are the only ones, and with several core shards they are spread over several
// namespaces, which one watch covers as well as one.
func startTracker(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (*tracker, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create the VM cache: %w", err)
	}
	inf, err := c.GetInformer(ctx, &banlieuev1.VirtualMachine{})
	if err != nil {
		return nil, fmt.Errorf("failed to watch the VMs: %w", err)
	}
	t := newTracker()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    t.observe,
		UpdateFunc: func(_, obj any) { t.observe(obj) },
		DeleteFunc: t.forget,
	}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the VM cache did not sync")
	}
	return t, nil
}

// observe records a VM's first sighting, its placement, its first Ready and its
// entering or leaving Ready.
func (t *tracker) observe(obj any) {
	vm, ok := obj.(*banlieuev1.VirtualMachine)
	if !ok {
		return
	}
	key := vm.Namespace + "/" + vm.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	t.backend[key] = vm.Labels[backendLabel]
	if _, ok := t.seen[key]; !ok {
		t.seen[key] = stamp(vm.CreationTimestamp, time.Now())
	}
	if s := vm.Status.Scheduled; s.ProviderName != "" {
		t.placed[key] = s.ProviderNamespace + "/" + s.ProviderName
	}
	at := time.Now()
	ready := meta.FindStatusCondition(vm.Status.Conditions, banlieuev1.ReadyCondition)
	isReady := ready != nil && ready.Status == metav1.ConditionTrue
	if isReady {
		at = stamp(ready.LastTransitionTime, at)
	}
	if _, seen := t.ready[key]; !seen && isReady {
		t.ready[key] = at
	}
	t.setReady(key, isReady, at)
}

// stamp is the time ts says, or otherwise when it is unset. A VM's times are taken from
// the object, its creation from the API server's clock and its Ready transition from
// core's, both on this machine, rather than from when the watch delivers them: the
// harness process, which also runs the simulators, can read its watch minutes late on
// a loaded machine, and every VM would then look Ready at once. They have a second's
// resolution.
func stamp(ts metav1.Time, otherwise time.Time) time.Time {
	if ts.IsZero() {
		return otherwise
	}
	return ts.Time
}

func (t *tracker) setReady(key string, isReady bool, at time.Time) {
	if t.readyNow[key] == isReady {
		return
	}
	delta := 1
	if isReady {
		t.readyNow[key] = true
	} else {
		delete(t.readyNow, key)
		delta = -1
	}
	t.changes = append(t.changes, readyChange{at: at, backend: t.backend[key], delta: delta})
}

// forget records a VM's deletion; one deleted while Ready leaves the Ready count.
func (t *tracker) forget(obj any) {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setReady(key, false, time.Now())
	delete(t.backend, key)
}

// readyChanges are the VMs' entries into and exits from Ready so far, in the order
// the watch showed them.
func (t *tracker) readyChanges() []readyChange {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.changes)
}

// placements count the VMs placed on each Provider, by "namespace/name".
func (t *tracker) placements() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := map[string]int{}
	for _, p := range t.placed {
		n[p]++
	}
	return n
}

// readyCount is how many VMs have been Ready.
func (t *tracker) readyCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ready)
}

// lastReadyBy is, for each backend, how long after start its last VM became Ready.
func (t *tracker) lastReadyBy(start time.Time) map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := map[string]time.Duration{}
	for key, at := range t.ready {
		be := t.backend[key]
		last[be] = max(last[be], at.Sub(start))
	}
	return last
}

// latencies are the VMs' times from creation (first seen in the watch) to Ready, by
// backend, and for all of them under "".
func (t *tracker) latencies() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]time.Duration{}
	for key, at := range t.ready {
		d := at.Sub(t.seen[key])
		out[""] = append(out[""], d)
		out[t.backend[key]] = append(out[t.backend[key]], d)
	}
	return out
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of ds; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// stallTimeout ends a wait in which no VM made progress for this long: the run is stuck
// (the controllers' logs say why), not slow.
const stallTimeout = 3 * time.Minute

// waitFor waits until left returns 0, printing progress, for at most timeout.
func (t *tracker) waitFor(ctx context.Context, timeout time.Duration, what string, left func(*tracker) int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastLog, lastN, lastProgress := time.Now(), -1, time.Now()
	for {
		n := left(t)
		if n == 0 {
			return nil
		}
		if n != lastN {
			lastN, lastProgress = n, time.Now()
		}
		if time.Since(lastProgress) >= stallTimeout {
			return fmt.Errorf("%d VMs are not %s and none made progress for %s; see the controllers' logs", n, what, stallTimeout)
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("%d VMs not %s yet", n, what)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%d VMs were not %s within %s", n, what, timeout)
			}
			return fmt.Errorf("stopped with %d VMs not %s: %w", n, what, ctx.Err())
		case <-tick.C:
		}
	}
}
