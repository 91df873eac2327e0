package proxmox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

// providerFor is a Provider of the simulator that verifies its certificate, with a
// storage class and a network class that exist and one of each that does not.
func providerFor(sim *proxmoxtest.Simulator) *banlieuev1.Provider {
	return &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "pve"},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: ProviderClass},
			Connection:       sim.Connection("pve-credentials"),
			Capabilities: banlieuev1.Capabilities{
				StorageClasses: []banlieuev1.ClassMapping{
					{Name: "fast", Target: map[string]string{"storage": proxmoxtest.Storage}},
					{Name: "ceph", Target: map[string]string{"storage": "ceph-rbd"}},
				},
				NetworkClasses: []banlieuev1.ClassMapping{
					{Name: "prod", Target: map[string]string{"bridge": proxmoxtest.Bridge}},
					{Name: "dmz", Target: map[string]string{"bridge": "vmbr9"}},
				},
			},
		},
	}
}

// infoFor is what the SDK hands Connect for p, with the token credentials.
func infoFor(sim *proxmoxtest.Simulator, p *banlieuev1.Provider) providersdk.ProviderInfo {
	return providersdk.ProviderInfo{Provider: p, Credentials: sim.TokenCredentials(), CABundle: []byte(p.Spec.Connection.CABundle.Inline)}
}

// connect opens a session to the simulator and closes it when the test ends.
func connect(t *testing.T, sim *proxmoxtest.Simulator, d *Driver) *session {
	t.Helper()
	s, err := d.connect(context.Background(), infoFor(sim, providerFor(sim)))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Disconnect(context.Background()) })
	return s
}

// newDriver is a driver that writes snippets into the simulator.
func newDriver(sim *proxmoxtest.Simulator, opts ...Option) *Driver {
	return NewDriver(append([]Option{WithSnippetWriter(sim)}, opts...)...)
}

// newMachine is a machine on pve1 asking for the template with 2 CPUs, 2 GiB and the
// template's 10 GiB disk, created now.
func newMachine(uid string) *providersdk.Machine {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	obj.SetCreationTimestamp(metav1.Now())
	return &providersdk.Machine{
		UID:       k8stypes.UID(uid),
		Namespace: "team-a",
		Name:      "web-" + uid[:8],
		Spec: infrav1.MachineSpec{
			FailureDomain: proxmoxtest.Node1,
			Image:         infrav1.MachineImage{Name: "ubuntu", Kind: banlieuev1.ImageSourceTemplate, Ref: proxmoxtest.TemplateName},
			Hardware:      infrav1.MachineHardware{CPUs: 2, MemoryMiB: 2048},
			Disks:         []infrav1.MachineDisk{{Name: "root", SizeGiB: proxmoxtest.TemplateDiskGiB, StorageClass: "fast"}},
			PowerState:    banlieuev1.PowerStatePoweredOn,
		},
		Object: obj,
	}
}

// settle observes the machine until its task ends, as the reconciler would: the task
// is recorded with its start time, and cleared when Observe reports none; the
// Observation's details go to the machine's status.proxmox.
func settle(t *testing.T, s *session, m *providersdk.Machine, task providersdk.Task) (providersdk.Observation, error) {
	t.Helper()
	if task.InFlight() {
		task.StartedAt = time.Now()
		m.Task = task
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := s.Observe(context.Background(), m)
		if err != nil {
			m.Task = providersdk.Task{}
			return o, err
		}
		record(t, m, o)
		if !o.Task.InFlight() {
			m.Task = providersdk.Task{}
			return o, nil
		}
		if time.Now().After(deadline) {
			return o, fmt.Errorf("task %s still in flight after 30s", o.Task.Ref)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record writes what the reconciler writes of an Observation to the machine: its
// details to status.proxmox and its provider ID to spec.providerID.
func record(t *testing.T, m *providersdk.Machine, o providersdk.Observation) {
	t.Helper()
	if d, ok := o.Details.(*infrav1.ProxmoxStatus); ok && d != nil {
		setStatusBlock(t, m, *d)
	}
	if o.ProviderID != "" {
		m.Spec.ProviderID = o.ProviderID
	}
}

// setStatusBlock sets the machine's status.proxmox.
func setStatusBlock(t *testing.T, m *providersdk.Machine, st infrav1.ProxmoxStatus) {
	t.Helper()
	block, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err == nil {
		err = unstructured.SetNestedMap(m.Object.Object, block, "status", "proxmox")
	}
	if err != nil {
		t.Fatalf("failed to set status.proxmox: %v", err)
	}
}

// converge runs the reconciler's loop against the simulator until the VM exists and
// is up to date, and fails the test if it does not.
func converge(t *testing.T, s *session, m *providersdk.Machine) providersdk.Observation {
	t.Helper()
	o, err := reconcile(t, s, m)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// reconcile is the reconciler's loop: Observe, then Create or Update, settling every
// task, until the VM exists and is up to date.
func reconcile(t *testing.T, s *session, m *providersdk.Machine) (providersdk.Observation, error) {
	t.Helper()
	ctx := context.Background()
	for range 30 {
		o, err := settle(t, s, m, m.Task)
		if err != nil {
			return o, fmt.Errorf("Observe: %w", err)
		}
		var task providersdk.Task
		switch {
		case !o.Exists:
			res, err := s.Create(ctx, m, providersdk.Observation{})
			if err != nil {
				return o, fmt.Errorf("Create: %w", err)
			}
			task = res.Task
		case !o.UpToDate:
			res, err := s.Update(ctx, m, o)
			if err != nil {
				return o, fmt.Errorf("Update: %w", err)
			}
			task = res.Task
		default:
			return o, nil
		}
		m.Task = task
		m.Task.StartedAt = time.Now()
	}
	return providersdk.Observation{}, fmt.Errorf("machine %s did not converge in 30 steps", m.Name)
}

// wantErr checks an error: nil when is is nil, else is(err) and its text holding want
// but never leak.
func wantErr(is func(error) bool, want, leak string) func(error) string {
	return func(err error) string {
		switch {
		case is == nil && err != nil:
			return "unexpected error: " + err.Error()
		case is == nil:
			return ""
		case err == nil:
			return "no error, want one containing " + want
		case !is(err):
			return "error of the wrong kind: " + err.Error()
		case !strings.Contains(err.Error(), want):
			return "error " + err.Error() + " does not say " + want
		case leak != "" && strings.Contains(err.Error(), leak):
			return "error leaks a secret: " + err.Error()
		}
		return ""
	}
}
