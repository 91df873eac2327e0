package providersdk

import (
	"github.com/prometheus/client_golang/prometheus"
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
