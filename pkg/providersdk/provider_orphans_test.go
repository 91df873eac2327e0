package providersdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// markedBackend is a backend whose marked VMs a test sets.
type markedBackend struct {
	mu     sync.Mutex
	vms    []providersdk.MarkedVM
	scans  int
	failed error
}

func (b *markedBackend) set(vms ...providersdk.MarkedVM) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vms = vms
}

func (b *markedBackend) driver() providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return struct {
			providersdk.NopClient
			providersdk.OrphanListerFunc
		}{OrphanListerFunc: func(context.Context) ([]providersdk.MarkedVM, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.scans++
			return b.vms, b.failed
		}}, nil
	})
}

// valueOf is the gauge's value.
func valueOf(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := g.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func TestOrphanedVMsAreReportedUntilTheyGo(t *testing.T) {
	e := newEnv(t)
	live := e.machine("live")
	leaving := e.machine("leaving", func(m *testv1.TestMachine) { m.Finalizers = []string{"test.banlieue.io/hold"} })
	if err := k8s.Delete(e.ctx, leaving); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.update(leaving, func(m *testv1.TestMachine) { m.Finalizers = nil })
	})
	leaving = e.get(leaving)

	b := &markedBackend{}
	vmOf := func(id string, m *testv1.TestMachine) providersdk.MarkedVM {
		return providersdk.MarkedVM{ProviderID: "test://" + id, Name: id, MachineUID: m.UID, Machine: client.ObjectKeyFromObject(m)}
	}
	gone := providersdk.MarkedVM{ProviderID: "test://b", Name: "b", MachineUID: "1b2c", Machine: types.NamespacedName{Namespace: e.ns, Name: "gone"}}
	// The machine named "live" exists, but with another UID: the VM was made for an
	// earlier machine of that name.
	renamed := providersdk.MarkedVM{ProviderID: "test://a", Name: "a", MachineUID: "0a1b", Machine: client.ObjectKeyFromObject(live)}
	unnamed := providersdk.MarkedVM{ProviderID: "test://c", Name: "c", MachineUID: "2c3d"}
	b.set(vmOf("live", live), vmOf("leaving", leaving), gone, renamed, unnamed)

	writes := 0
	r := providersdk.NewProviderReconciler(statusWrites{Client: k8s, n: &writes}, provider.ProviderClass, testMachineGVK,
		providersdk.NewSessions(b.driver(), k8s), time.Minute, providersdk.WithMachineReader(machineCache), providersdk.WithOrphanScan(0))
	gauge := providersdk.ProviderOrphanedVMs.WithLabelValues(provider.ProviderClass, client.ObjectKeyFromObject(e.provider).String())

	e.reconcileProvider(r)
	want := banlieuev1.ProviderOrphans{Count: 3, VMs: []banlieuev1.OrphanedVM{
		{ProviderID: "test://a", Name: "a", Machine: e.ns + "/live/0a1b"},
		{ProviderID: "test://b", Name: "b", Machine: e.ns + "/gone/1b2c"},
		{ProviderID: "test://c", Name: "c", Machine: "2c3d"},
	}}
	if diff := cmp.Diff(want, e.getProvider().Status.Orphans); diff != "" {
		t.Errorf("status.orphans (-want +got):\n%s", diff)
	}
	if got := valueOf(t, gauge); got != 3 {
		t.Errorf("banlieue_provider_orphaned_vms is %v, want 3", got)
	}

	// Nothing changed: the scan runs again and writes nothing.
	before := writes
	e.reconcileProvider(r)
	if writes != before {
		t.Errorf("an unchanged report wrote the Provider's status %d times, want none", writes-before)
	}

	// The orphans are deleted on the backend.
	b.set(vmOf("live", live))
	e.reconcileProvider(r)
	if got := e.getProvider().Status.Orphans; !cmp.Equal(got, banlieuev1.ProviderOrphans{}) {
		t.Errorf("status.orphans is %+v once the orphans are gone, want unset", got)
	}
	if got := valueOf(t, gauge); got != 0 {
		t.Errorf("banlieue_provider_orphaned_vms is %v once the orphans are gone, want 0", got)
	}
	if b.scans != 3 {
		t.Errorf("the backend was scanned %d times, want 3", b.scans)
	}
}

func TestOrphansAreLookedForAtMostEveryScanInterval(t *testing.T) {
	e := newEnv(t)
	b := &markedBackend{}
	b.set(providersdk.MarkedVM{ProviderID: "test://x", Name: "x", MachineUID: "9f"})
	r := providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK, providersdk.NewSessions(b.driver(), k8s), time.Minute,
		providersdk.WithMachineReader(machineCache), providersdk.WithOrphanScan(time.Hour))
	e.reconcileProvider(r)
	b.set()
	res := e.reconcileProvider(r)
	if b.scans != 1 {
		t.Errorf("the backend was scanned %d times within the interval, want 1", b.scans)
	}
	if got := e.getProvider().Status.Orphans.Count; got != 1 {
		t.Errorf("status.orphans.count is %d between scans, want the last scan's 1", got)
	}
	if res.RequeueAfter != time.Minute {
		t.Errorf("the Provider is looked at again after %v, want the inventory interval", res.RequeueAfter)
	}

	// The Provider goes, and its series with it.
	if err := k8s.Delete(e.ctx, e.provider); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	e.reconcileProvider(r)
	key := client.ObjectKeyFromObject(e.provider).String()
	ch := make(chan prometheus.Metric, 1024)
	go func() { providersdk.ProviderOrphanedVMs.Collect(ch); close(ch) }()
	for m := range ch {
		d := &dto.Metric{}
		if err := m.Write(d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "provider" && l.GetValue() == key {
				t.Errorf("banlieue_provider_orphaned_vms still has a series for the deleted Provider %s", key)
			}
		}
	}
}
