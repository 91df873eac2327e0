package providersdk

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// BackendCalls counts the calls a provider makes to its backends' APIs, by provider
// class, operation (the backend's own name, e.g. CloneVM_Task) and result ("ok" or
// "error"). Drivers record them with CountBackendCall; it is served with the
// controller-runtime metrics of the process.
var BackendCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "banlieue_backend_calls_total",
	Help: "Calls to backend APIs, by provider class, operation and result.",
}, []string{"class", "operation", "result"})

func init() { metrics.Registry.MustRegister(BackendCalls) }

// CountBackendCall records one backend API call of class doing operation, which failed
// when err is not nil.
func CountBackendCall(class, operation string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	BackendCalls.WithLabelValues(class, operation, result).Inc()
}

// TasksInFlight is the number of machines whose status.task is set, that is whose
// backend task is being polled, by provider class. Each Reconciler keeps it from its
// own reconciles, without listing machines.
var TasksInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "banlieue_backend_tasks_in_flight",
	Help: "Machines with a backend task in flight (status.task set), by provider class.",
}, []string{"class"})

func init() { metrics.Registry.MustRegister(TasksInFlight) }

// taskTracker knows which of a Reconciler's machines count in TasksInFlight, by UID,
// so each reconcile only adds or removes its own machine.
type taskTracker struct {
	gauge prometheus.Gauge
	mu    sync.Mutex
	// inFlight holds the machines that count, with their names for a machine that is
	// gone before its finalizer was seen removed.
	inFlight map[types.UID]types.NamespacedName
}

func newTaskTracker(class string) *taskTracker {
	// The series exists at zero from the start, so "no task in flight" is a value.
	return &taskTracker{gauge: TasksInFlight.WithLabelValues(class), inFlight: map[types.UID]types.NamespacedName{}}
}

// set records whether the machine with uid, named key, has a task in flight.
func (t *taskTracker) set(uid types.UID, key types.NamespacedName, inFlight bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, counted := t.inFlight[uid]
	switch {
	case inFlight && !counted:
		t.inFlight[uid] = key
		t.gauge.Inc()
	case !inFlight && counted:
		delete(t.inFlight, uid)
		t.gauge.Dec()
	}
}

// forgetName drops the machine named key, which no longer exists.
func (t *taskTracker) forgetName(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid, k := range t.inFlight {
		if k == key {
			delete(t.inFlight, uid)
			t.gauge.Dec()
		}
	}
}
