package providersdk_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
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

// orphanBackend is a backend of VMs by machine UID that lists them as marked and
// deletes them as a driver would.
type orphanBackend struct {
	mu      sync.Mutex
	vms     map[types.UID]providersdk.MarkedVM
	deleted []*providersdk.Machine
	// async makes Delete start a task: the VM is gone once the backend is next read.
	async   bool
	pending []types.UID
}

func (b *orphanBackend) driver() providersdk.Driver {
	return providersdk.DriverFunc(func(context.Context, providersdk.ProviderInfo) (providersdk.Client, error) {
		return struct {
			providersdk.ClientFns
			providersdk.OrphanListerFunc
		}{
			ClientFns: providersdk.ClientFns{
				ObserveFn: func(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
					b.mu.Lock()
					defer b.mu.Unlock()
					b.settle()
					vm, ok := b.vms[m.UID]
					return providersdk.Observation{Exists: ok, ProviderID: vm.ProviderID}, nil
				},
				DeleteFn: func(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
					b.mu.Lock()
					defer b.mu.Unlock()
					b.deleted = append(b.deleted, m)
					if b.async {
						b.pending = append(b.pending, m.UID)
						return providersdk.DeleteResult{Task: providersdk.Task{Ref: "task-1"}}, nil
					}
					delete(b.vms, m.UID)
					return providersdk.DeleteResult{}, nil
				},
			},
			OrphanListerFunc: func(context.Context) ([]providersdk.MarkedVM, error) {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.settle()
				out := make([]providersdk.MarkedVM, 0, len(b.vms))
				for _, vm := range b.vms {
					out = append(out, vm)
				}
				return out, nil
			},
		}, nil
	})
}

// settle ends the deletion tasks started.
func (b *orphanBackend) settle() {
	for _, uid := range b.pending {
		delete(b.vms, uid)
	}
	b.pending = nil
}

func TestOrphanPolicyDeleteDeletesOnlyThisClustersOrphansTwoScansFound(t *testing.T) {
	e := newEnv(t)
	ns := &corev1.Namespace{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Name: providersdk.ClusterNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	cluster := string(ns.UID)
	live := e.machine("live")
	ours := providersdk.MarkedVM{ProviderID: "test://ours", Name: "ours", MachineUID: "0a", ClusterID: cluster,
		Machine: types.NamespacedName{Namespace: e.ns, Name: "gone"}}
	b := &orphanBackend{vms: map[types.UID]providersdk.MarkedVM{
		live.UID: {ProviderID: "test://live", Name: "live", MachineUID: live.UID, ClusterID: cluster, Machine: client.ObjectKeyFromObject(live)},
		"0a":     ours,
		// A mark written before marks named the cluster: reported, never deleted.
		"1b": {ProviderID: "test://old", Name: "old", MachineUID: "1b"},
		// Another cluster's VM on the same backend: its own cluster reports it.
		"2c": {ProviderID: "test://theirs", Name: "theirs", MachineUID: "2c", ClusterID: "another-cluster"},
		// A VM a machine of this cluster adopted: its owner's before, reported, never deleted.
		"3d": {ProviderID: "test://adopted", Name: "adopted", MachineUID: "3d", ClusterID: cluster, Adopted: true},
	}}
	r := providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK,
		providersdk.NewSessions(b.driver(), k8s), time.Minute, providersdk.WithMachineReader(machineCache), providersdk.WithOrphanScan(0))
	deleted := providersdk.ProviderOrphansDeleted.WithLabelValues(provider.ProviderClass, client.ObjectKeyFromObject(e.provider).String())
	reported := banlieuev1.ProviderOrphans{Count: 3, VMs: []banlieuev1.OrphanedVM{
		{ProviderID: "test://adopted", Name: "adopted", Machine: "3d"},
		{ProviderID: "test://old", Name: "old", Machine: "1b"},
		{ProviderID: "test://ours", Name: "ours", Machine: e.ns + "/gone/0a"},
	}}

	// Under Report, the default, two scans and more delete nothing.
	for range 2 {
		e.reconcileProvider(r)
	}
	if diff := cmp.Diff(reported, e.getProvider().Status.Orphans); diff != "" {
		t.Errorf("status.orphans (-want +got):\n%s", diff)
	}
	if len(b.deleted) != 0 {
		t.Fatalf("orphanPolicy Report deleted %d VMs", len(b.deleted))
	}

	// Delete: the orphan the last scan found too is deleted at once, as its machine's
	// deletion would; the others stay.
	p := e.getProvider()
	p.Spec.OrphanPolicy = banlieuev1.OrphanPolicyDelete
	if err := k8s.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcileProvider(r)
	if len(b.deleted) != 1 {
		t.Fatalf("orphanPolicy Delete deleted %d VMs, want 1", len(b.deleted))
	}
	got := b.deleted[0]
	if got.UID != "0a" || got.Name != "gone" || got.Namespace != e.ns || !got.Deleting || got.ClusterID != cluster || got.Spec.ProviderID != "test://ours" {
		t.Errorf("the orphan was deleted as machine %+v", got)
	}
	if diff := cmp.Diff(reported.VMs[:2], e.getProvider().Status.Orphans.VMs); diff != "" {
		t.Errorf("status.orphans.vms after the deletion (-want +got):\n%s", diff)
	}
	m := &dto.Metric{}
	if err := deleted.Write(m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("banlieue_provider_orphans_deleted_total is %v, want 1", got)
	}
	if !slices.ContainsFunc(e.getProvider().Status.SupportedOperations, func(op banlieuev1.ProviderOperation) bool {
		return op == banlieuev1.ProviderOperationReportOrphans
	}) {
		t.Errorf("status.supportedOperations %v lacks ReportOrphans", e.getProvider().Status.SupportedOperations)
	}
}

func TestAnOrphanFoundOnceIsNotDeleted(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.OrphanPolicy = banlieuev1.OrphanPolicyDelete })
	ns := &corev1.Namespace{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Name: providersdk.ClusterNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	b := &orphanBackend{vms: map[types.UID]providersdk.MarkedVM{
		"0a": {ProviderID: "test://ours", Name: "ours", MachineUID: "0a", ClusterID: string(ns.UID)},
	}}
	r := providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK,
		providersdk.NewSessions(b.driver(), k8s), time.Minute, providersdk.WithMachineReader(machineCache), providersdk.WithOrphanScan(0))
	e.reconcileProvider(r)
	if len(b.deleted) != 0 || e.getProvider().Status.Orphans.Count != 1 {
		t.Errorf("the first scan deleted %d VMs and reported %d orphans; want none deleted, one reported", len(b.deleted), e.getProvider().Status.Orphans.Count)
	}
	// Its machine turns up (a cache that lagged, a restore from backup): a VM is an
	// orphan again only once two scans in a row find it so.
	b.mu.Lock()
	delete(b.vms, "0a")
	b.mu.Unlock()
	e.reconcileProvider(r)
	b.mu.Lock()
	b.vms["0a"] = providersdk.MarkedVM{ProviderID: "test://ours", Name: "ours", MachineUID: "0a", ClusterID: string(ns.UID)}
	b.mu.Unlock()
	e.reconcileProvider(r)
	if len(b.deleted) != 0 {
		t.Errorf("an orphan found in scans 1 and 3 but not 2 was deleted")
	}
}

func TestAnOrphanABackendTaskDeletesIsRecordedOnceGone(t *testing.T) {
	e := newEnv(t, func(p *banlieuev1.Provider) { p.Spec.OrphanPolicy = banlieuev1.OrphanPolicyDelete })
	ns := &corev1.Namespace{}
	if err := k8s.Get(e.ctx, client.ObjectKey{Name: providersdk.ClusterNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	b := &orphanBackend{async: true, vms: map[types.UID]providersdk.MarkedVM{
		"0a": {ProviderID: "test://ours", Name: "ours", MachineUID: "0a", ClusterID: string(ns.UID)},
	}}
	r := providersdk.NewProviderReconciler(k8s, provider.ProviderClass, testMachineGVK,
		providersdk.NewSessions(b.driver(), k8s), time.Minute, providersdk.WithMachineReader(machineCache), providersdk.WithOrphanScan(0))
	deleted := providersdk.ProviderOrphansDeleted.WithLabelValues(provider.ProviderClass, client.ObjectKeyFromObject(e.provider).String())
	count := func() float64 {
		m := &dto.Metric{}
		if err := deleted.Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	for scan, want := range []struct {
		deletes int
		counted float64
	}{
		{deletes: 0, counted: 0}, // found once
		{deletes: 1, counted: 0}, // found twice: the task starts
		{deletes: 1, counted: 1}, // no longer listed: deleted
		{deletes: 1, counted: 1},
	} {
		e.reconcileProvider(r)
		if len(b.deleted) != want.deletes || count() != want.counted {
			t.Errorf("after scan %d: %d Deletes, %v counted; want %d, %v", scan+1, len(b.deleted), count(), want.deletes, want.counted)
		}
	}
}
