package vsphere

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vmware/govmomi/simulator"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// backendCalls reads banlieue_backend_calls_total of this provider class, by operation.
func backendCalls() map[string]float64 {
	ch := make(chan prometheus.Metric, 1024)
	go func() { providersdk.BackendCalls.Collect(ch); close(ch) }()
	calls := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["class"] == ProviderClass {
			calls[labels["operation"]] += d.GetCounter().GetValue()
		}
	}
	return calls
}

// callsSince returns the calls made since before, by operation, leaving out those
// that did not grow.
func callsSince(before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for op, n := range backendCalls() {
		if d := n - before[op]; d > 0 {
			out[op] = d
		}
	}
	return out
}

func TestGuestsWithAddressesReadsEveryVMsPrimaryAddressInOneCall(t *testing.T) {
	sim := vspheretest.Start(t, vspheretest.WithModel(func(m *simulator.Model) { m.Datacenter = 2 }))
	ctx := context.Background()
	s := connect(t, sim, NewDriver(), func(p *banlieuev1.Provider) { p.Spec.Parameters = map[string]string{"datacenter": "DC0"} })

	const uid = "5b0e7d0e-1c8a-4a52-9a55-0c3c0b1f0a0a"
	m := newMachine(uid)
	res, err := afterObserve(s, m, s.Create)
	if err != nil {
		t.Fatal(err)
	}
	o := settle(t, s, m, res.Task)
	if !o.WaitingForGuest || o.ProviderID == "" {
		t.Fatalf("after the clone: %+v, want a running VM with a providerID waiting for its guest", o)
	}
	moRef := o.Details.(*infrav1.VSphereStatus).MoRef
	// A VM of the other datacenter, whose guest has an address, is not the Provider's.
	var other string
	vms, err := sim.VMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.Name == "DC1_H0_VM0" {
			other = "vsphere://" + vm.Config.Uuid
			if err := sim.SetGuestIP(ctx, vm.Self.Value, "10.1.0.1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if other == "" {
		t.Fatal("no VM DC1_H0_VM0 in the simulator")
	}
	if _, err := s.Inventory(ctx); err != nil { // as the Provider controller does first
		t.Fatal(err)
	}

	// Every VM's primary address is read once, through a view made for it, whatever the
	// number of VMs; the NICs of a VM only when Observe would drop its primary address.
	oneRead := map[string]float64{"CreateContainerView": 1, "RetrievePropertiesEx": 1, "DestroyView": 1}
	nicsToo := map[string]float64{"CreateContainerView": 1, "RetrievePropertiesEx": 2, "DestroyView": 1}
	for _, step := range []struct {
		name, ip string
		calls    map[string]float64
		reported bool
	}{
		{"no address", "", oneRead, false},
		// Observe reports no link-local address, so neither does this, NICs read.
		{"a link-local address", "169.254.3.4", nicsToo, false},
		{"an address", "10.0.0.9", oneRead, true},
	} {
		if step.ip != "" {
			if err := sim.SetGuestIP(ctx, moRef, step.ip); err != nil {
				t.Fatal(err)
			}
		}
		before := backendCalls()
		got, err := s.GuestsWithAddresses(ctx)
		if err != nil {
			t.Fatalf("%s: GuestsWithAddresses: %v", step.name, err)
		}
		if diff := cmp.Diff(step.calls, callsSince(before)); diff != "" {
			t.Errorf("%s: backend calls (-want +got):\n%s", step.name, diff)
		}
		if got[other] {
			t.Errorf("%s: a VM of another datacenter is reported", step.name)
		}
		if got[o.ProviderID] != step.reported {
			t.Errorf("%s: the guest reported = %v, want %v", step.name, got[o.ProviderID], step.reported)
		}
	}
	if o, err = s.Observe(ctx, m); err != nil || len(o.Addresses) == 0 {
		t.Errorf("Observe = %+v, %v; want the address GuestsWithAddresses saw", o, err)
	}
}

func TestListMarkedFindsTheMachinesVMsInOneRead(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	s := connect(t, sim, NewDriver())
	want := make([]providersdk.MarkedVM, 0, 2)
	for _, uid := range []string{"0e1d2c3b-1c8a-4a52-9a55-0c3c0b1f0a0a", "7f6e5d4c-1c8a-4a52-9a55-0c3c0b1f0a0b"} {
		m := newMachine(uid)
		m.ClusterID = "cluster-" + uid[:8]
		res, err := afterObserve(s, m, s.Create)
		if err != nil {
			t.Fatal(err)
		}
		o := settle(t, s, m, res.Task)
		want = append(want, providersdk.MarkedVM{ProviderID: o.ProviderID, Name: vmName(m.Namespace, m.Name), MachineUID: m.UID,
			Machine: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, ClusterID: m.ClusterID})
	}
	// The second machine goes without its VM being deleted: its VM is still listed,
	// for the Provider controller to find no machine of that UID.
	if _, err := s.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	before := backendCalls()
	got, err := s.ListMarked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The simulator's own VMs and the template carry no mark.
	less := func(a, b providersdk.MarkedVM) bool { return a.ProviderID < b.ProviderID }
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(less)); diff != "" {
		t.Errorf("ListMarked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"CreateContainerView": 1, "RetrievePropertiesEx": 1, "DestroyView": 1}, callsSince(before)); diff != "" {
		t.Errorf("backend calls (-want +got):\n%s", diff)
	}
}

// BenchmarkGuestsWithAddresses is one answer for a datacenter of 1,000 running VMs
// whose guests report no address yet, as while VMs start by the thousand.
func BenchmarkGuestsWithAddresses(b *testing.B) {
	sim := vspheretest.Start(b, vspheretest.WithModel(func(m *simulator.Model) { m.Host, m.Cluster, m.Machine = 1, 1, 500 }))
	ctx := context.Background()
	cl, err := NewDriver().Connect(ctx, infoFor(sim, providerFor(sim)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	s := cl.(*session)
	if vms, err := sim.VMs(ctx); err != nil || len(vms) < 1000 {
		b.Fatalf("%d VMs, %v; want 1,000", len(vms), err)
	}
	for b.Loop() {
		if _, err := s.GuestsWithAddresses(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
