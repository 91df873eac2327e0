package providersdk

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
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

// machineLiveReads counts the machines read from the API server because the cache had
// not caught up yet with the provider's own last write to them (readMachine).
var machineLiveReads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "banlieue_machine_live_reads_total",
	Help: "Machines read from the API server because the cache had not caught up yet with the provider's own last write to them, by provider class.",
}, []string{"class"})

func init() { metrics.Registry.MustRegister(machineLiveReads) }

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

// ProviderConditions is a Provider's conditions as its provider controller last
// computed them: one series per Provider (namespace, name), provider class and
// condition type (Ready, BackendReachable, CredentialsValid), labelled with the
// condition's reason, whose value is 1 when the condition is True and 0 otherwise. A
// Provider has one series per type at a time: when the reason changes, the series of
// the old reason goes. Only the replica that holds the leader election reconciles, so
// only it reports; a Provider that is gone, or no longer of the class, reports nothing.
// Alerts match on the reason to tell a paused Provider (Ready=False, reason Paused)
// from a broken one.
var ProviderConditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "banlieue_provider_condition",
	Help: "A Provider's conditions by type and reason: 1 when True, 0 otherwise.",
}, []string{"namespace", "name", "class", "type", "reason"})

func init() { metrics.Registry.MustRegister(ProviderConditions) }

// providerConditionTypes are the condition types of a Provider that ProviderConditions
// reports; a condition of another type is left out, so the series stay few.
var providerConditionTypes = []string{
	banlieuev1.ReadyCondition,
	banlieuev1.ProviderBackendReachableCondition,
	banlieuev1.ProviderCredentialsValidCondition,
}

// providerReasons is the reason each reported series carries, by Provider, class and
// condition type, so that a changed reason replaces its series without a gap.
var providerReasons = struct {
	mu      sync.Mutex
	reasons map[providerConditionKey]string
}{reasons: map[providerConditionKey]string{}}

// providerConditionKey is one Provider's condition type, as ProviderConditions reports it.
type providerConditionKey struct {
	provider types.NamespacedName
	class    string
	typ      string
}

// recordProviderConditions sets ProviderConditions for the Provider key of class from
// conditions, dropping the series of a type the Provider no longer has, or of a reason
// it no longer has.
func recordProviderConditions(key types.NamespacedName, class string, conditions []metav1.Condition) {
	providerReasons.mu.Lock()
	defer providerReasons.mu.Unlock()
	for _, t := range providerConditionTypes {
		k := providerConditionKey{provider: key, class: class, typ: t}
		old, reported := providerReasons.reasons[k]
		c := meta.FindStatusCondition(conditions, t)
		if reported && (c == nil || c.Reason != old) {
			ProviderConditions.DeleteLabelValues(key.Namespace, key.Name, class, t, old)
			delete(providerReasons.reasons, k)
		}
		if c == nil {
			continue
		}
		v := 0.0
		if c.Status == metav1.ConditionTrue {
			v = 1
		}
		ProviderConditions.WithLabelValues(key.Namespace, key.Name, class, t, c.Reason).Set(v)
		providerReasons.reasons[k] = c.Reason
	}
}

// forgetProviderConditions drops every series of the Provider key of class.
func forgetProviderConditions(key types.NamespacedName, class string) {
	recordProviderConditions(key, class, nil)
}

// ProviderOrphanedVMs is the number of orphaned VMs a Provider's last orphan scan found
// (status.orphans.count): backend VMs with a machine's identity mark whose machine no
// longer exists. One series per Provider of the class, provider being
// "<namespace>/<name>", at zero when there is none or the driver cannot list its marked
// VMs, so that the series exists for every Provider; it goes with the Provider.
var ProviderOrphanedVMs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "banlieue_provider_orphaned_vms",
	Help: "Backend VMs with a machine's identity mark but no machine, by provider class and Provider.",
}, []string{"class", "provider"})

// ProviderOrphansDeleted counts the orphaned VMs a Provider's spec.orphanPolicy Delete
// deleted, by provider class and Provider ("<namespace>/<name>").
var ProviderOrphansDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "banlieue_provider_orphans_deleted_total",
	Help: "Orphaned backend VMs deleted under spec.orphanPolicy Delete, by provider class and Provider.",
}, []string{"class", "provider"})

func init() { metrics.Registry.MustRegister(ProviderOrphanedVMs, ProviderOrphansDeleted) }

// recordProviderOrphans sets ProviderOrphanedVMs for the Provider key of class from its
// orphan report.
func recordProviderOrphans(key types.NamespacedName, class string, orphans banlieuev1.ProviderOrphans) {
	ProviderOrphanedVMs.WithLabelValues(class, key.String()).Set(float64(orphans.Count))
}

// forgetProviderMetrics drops every series of the Provider key of class.
func forgetProviderMetrics(key types.NamespacedName, class string) {
	forgetProviderConditions(key, class)
	ProviderOrphanedVMs.DeleteLabelValues(class, key.String())
	ProviderOrphansDeleted.DeleteLabelValues(class, key.String())
}
