package vsphere

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// providerFor is a Provider of the simulator that verifies its certificate.
func providerFor(sim *vspheretest.Simulator) *banlieuev1.Provider {
	return &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vc"},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: ProviderClass},
			Connection:       sim.Connection("vc-credentials"),
			// The tests' image servers listen on loopback.
			Parameters: map[string]string{providersdk.ParamAllowLoopbackImports: "true"},
		},
	}
}

// infoFor is what the SDK hands Connect for p.
func infoFor(sim *vspheretest.Simulator, p *banlieuev1.Provider) providersdk.ProviderInfo {
	return providersdk.ProviderInfo{Provider: p, Credentials: sim.Credentials(), CABundle: []byte(p.Spec.Connection.CABundle.Inline)}
}

// connect opens a session to the simulator and closes it when the test ends.
func connect(t *testing.T, sim *vspheretest.Simulator, d *Driver, edit ...func(*banlieuev1.Provider)) *session {
	t.Helper()
	p := providerFor(sim)
	for _, e := range edit {
		e(p)
	}
	cl, err := d.Connect(context.Background(), infoFor(sim, p))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return cl.(*session)
}

// afterObserve calls Observe, as the Reconciler does first in every reconcile, and hands
// what it observed to call: the session's Create, Update or Delete. An Observe error is
// returned as call's.
func afterObserve[R any](cl providersdk.Client, m *providersdk.Machine, call func(context.Context, *providersdk.Machine, providersdk.Observation) (R, error)) (R, error) {
	obs, err := cl.Observe(context.Background(), m)
	if err != nil {
		var none R
		return none, err
	}
	return call(context.Background(), m, obs)
}

// moref is r as govmomi takes it, for tests that act on the simulator themselves.
func moref(r vcenter.Ref) types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: r.Type, Value: r.Value}
}

// vmDisks returns a VM's disks' sizes in GiB, in bus order (by controller, then unit),
// and whether each is thin.
func vmDisks(vm mo.VirtualMachine) (sizes []int64, thin []bool) {
	var list []*types.VirtualDisk
	for _, d := range vm.Config.Hardware.Device {
		if disk, ok := d.(*types.VirtualDisk); ok {
			list = append(list, disk)
		}
	}
	unit := func(d *types.VirtualDisk) int32 {
		if d.UnitNumber == nil {
			return -1
		}
		return *d.UnitNumber
	}
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].ControllerKey != list[j].ControllerKey {
			return list[i].ControllerKey < list[j].ControllerKey
		}
		return unit(list[i]) < unit(list[j])
	})
	for _, d := range list {
		bytes := d.CapacityInBytes
		if bytes == 0 {
			bytes = d.CapacityInKB * 1024
		}
		sizes = append(sizes, bytes/providersdk.GiB)
		b, _ := d.Backing.(*types.VirtualDiskFlatVer2BackingInfo)
		thin = append(thin, b != nil && b.ThinProvisioned != nil && *b.ThinProvisioned)
	}
	return sizes, thin
}

// vmNICs returns a VM's network cards in device-key order, the order they were added in.
func vmNICs(vm mo.VirtualMachine) []types.BaseVirtualDevice {
	var out []types.BaseVirtualDevice
	for _, d := range vm.Config.Hardware.Device {
		if _, ok := d.(types.BaseVirtualEthernetCard); ok {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetVirtualDevice().Key < out[j].GetVirtualDevice().Key })
	return out
}

// newMachine is a machine asking for the template with 2 CPUs, 2 GiB and a 10 GiB disk.
func newMachine(uid string) *providersdk.Machine {
	m := &providersdk.Machine{
		UID:       k8stypes.UID(uid),
		Namespace: "team-a",
		Name:      "web-" + uid[:8],
		Spec: infrav1.MachineSpec{
			FailureDomain: "dc0-dc0-c0",
			Image:         infrav1.MachineImage{Name: "ubuntu", Kind: banlieuev1.ImageSourceTemplate, Ref: vspheretest.TemplateName},
			Hardware:      infrav1.MachineHardware{CPUs: 2, MemoryMiB: 2048},
			Disks:         []infrav1.MachineDisk{{Name: "root", SizeGiB: vspheretest.TemplateDiskGiB, StorageClass: "standard"}},
			PowerState:    banlieuev1.PowerStatePoweredOn,
		},
		Object: &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}},
	}
	return m
}

// settle observes the machine until its task ends, as the reconciler would: the task
// is recorded with its start time, and cleared when Observe reports none.
func settle(t *testing.T, s *session, m *providersdk.Machine, task providersdk.Task) providersdk.Observation {
	t.Helper()
	if task.InFlight() {
		task.StartedAt = time.Now()
		m.Task = task
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := s.Observe(context.Background(), m)
		if err != nil {
			t.Fatalf("Observe: %v", err)
		}
		if !o.Task.InFlight() {
			m.Task = providersdk.Task{}
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still in flight after 30s", o.Task.Ref)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
