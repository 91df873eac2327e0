package virtualmachine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// VirtualMachines is the number of VirtualMachines by phase and Provider ("namespace/name",
// empty while unscheduled), as the core controller last wrote them. It is kept from each
// reconcile's before and after, not from a List, so an idle system does no work for it.
var VirtualMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "banlieue_virtualmachines",
	Help: "VirtualMachines by phase and Provider (namespace/name, empty while unscheduled).",
}, []string{"phase", "provider"})

// VirtualMachineReadySeconds is the time from a VirtualMachine's creation to its first
// Ready=True, observed once per VM by the process that saw the VM turn Ready.
var VirtualMachineReadySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: "banlieue_virtualmachine_ready_seconds",
	Help: "Seconds from a VirtualMachine's creation to its first Ready=True.",
	// Provisioning takes from seconds (a linked clone) to hours (an image import).
	Buckets: prometheus.ExponentialBuckets(5, 2, 12),
})

// VirtualMachineRestarts counts the restarts (spec.restartRequestedAt) that VMs'
// machines reported done, by Provider ("namespace/name"), counted with the status write
// that records each one, which carries its Restarted Event: a crash there can lose a
// count, never count one twice.
var VirtualMachineRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "banlieue_virtualmachine_restarts_total",
	Help: "Restarts asked by spec.restartRequestedAt that the VM's machine reported done, by Provider (namespace/name).",
}, []string{"provider"})

func init() {
	metrics.Registry.MustRegister(VirtualMachines, VirtualMachineReadySeconds, VirtualMachineRestarts)
}

// vmCount is what one VM contributes to VirtualMachines.
type vmCount struct {
	key      types.NamespacedName
	phase    banlieuev1.Phase
	provider string
	// readyObserved is set once the VM's time to Ready was observed, so a VM that
	// turns Ready again later is not counted twice.
	readyObserved bool
}

// vmMetrics keeps, per VM UID, what the VM contributes to the metrics, so each
// reconcile only moves the VM from its old series to its new one.
type vmMetrics struct {
	mu  sync.Mutex
	vms map[types.UID]*vmCount
}

// record sets the phase and Provider the VM vm counts under, from its status as stored.
func (m *vmMetrics) record(vm *banlieuev1.VirtualMachine) {
	provider := ""
	if vm.Status.Scheduled.IsDefined() {
		provider = locationOf(vm).ProviderKey()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vms == nil {
		m.vms = map[types.UID]*vmCount{}
	}
	c, ok := m.vms[vm.UID]
	if ok && c.phase == vm.Status.Phase && c.provider == provider {
		return
	}
	if ok && c.phase != "" {
		VirtualMachines.WithLabelValues(string(c.phase), c.provider).Dec()
	}
	if !ok {
		c = &vmCount{key: types.NamespacedName{Namespace: vm.Namespace, Name: vm.Name}}
		m.vms[vm.UID] = c
	}
	c.phase, c.provider = vm.Status.Phase, provider
	// A VM that was never reconciled (paused from its creation) has no phase yet.
	if c.phase != "" {
		VirtualMachines.WithLabelValues(string(c.phase), c.provider).Inc()
	}
}

// forget drops the VM with uid from the metrics, once it is released for deletion.
func (m *vmMetrics) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(uid)
}

// forgetName drops the VM named key: a VM that is gone before this process saw it
// released is only known by its name.
func (m *vmMetrics) forgetName(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, c := range m.vms {
		if c.key == key {
			m.forgetLocked(uid)
		}
	}
}

func (m *vmMetrics) forgetLocked(uid types.UID) {
	c, ok := m.vms[uid]
	if !ok {
		return
	}
	if c.phase != "" {
		VirtualMachines.WithLabelValues(string(c.phase), c.provider).Dec()
	}
	delete(m.vms, uid)
}

// observeReady observes the VM's time to Ready, and reports whether it did, when this
// reconcile wrote the VM's Ready condition from not True (before) to True (after).
// Only a transition this process wrote counts: a restarted controller finds VMs that
// are Ready already and does not observe them, however long ago they turned Ready.
// A VM observed once is not observed again while this process runs.
func (m *vmMetrics) observeReady(before, after *banlieuev1.VirtualMachine) bool {
	if meta.IsStatusConditionTrue(before.Status.Conditions, banlieuev1.ReadyCondition) {
		return false
	}
	c := meta.FindStatusCondition(after.Status.Conditions, banlieuev1.ReadyCondition)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	entry, ok := m.vms[after.UID]
	if !ok || entry.readyObserved {
		// record runs first, so a VM missing here is already released.
		return false
	}
	entry.readyObserved = true
	VirtualMachineReadySeconds.Observe(c.LastTransitionTime.Sub(after.CreationTimestamp.Time).Seconds())
	return true
}
