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
			// The tests' image servers listen on loopback.
			Parameters: map[string]string{providersdk.ParamAllowLoopbackImports: "true"},
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

// connect opens a session to the simulator, for providerFor's Provider changed by
// mods, and closes it when the test ends.
func connect(t *testing.T, sim *proxmoxtest.Simulator, d *Driver, mods ...func(*banlieuev1.Provider)) *session {
	t.Helper()
	p := providerFor(sim)
	for _, mod := range mods {
		mod(p)
	}
	cl, err := d.Connect(context.Background(), infoFor(sim, p))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	return cl.(*session)
}

// newDriver is a driver that writes snippets into the simulator.
func newDriver(sim *proxmoxtest.Simulator) *Driver {
	return NewDriver(WithSnippetWriter(sim))
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
// in flight (the one given, then the one Observe reports) is recorded with its start
// time, and cleared when Observe reports none; the Observation's details go to the
// machine's status.proxmox.
func settle(t *testing.T, s *session, m *providersdk.Machine, task providersdk.Task) (providersdk.Observation, error) {
	t.Helper()
	setTask(m, task)
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := s.Observe(context.Background(), m)
		if err != nil {
			m.Task = providersdk.Task{}
			return o, err
		}
		record(t, m, o)
		setTask(m, o.Task)
		if !o.Task.InFlight() {
			return o, nil
		}
		if time.Now().After(deadline) {
			return o, fmt.Errorf("task %s still in flight after 30s", o.Task.Ref)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// setTask records the task in flight in the machine as the reconciler does in its
// status.task: with the time it was first recorded, kept while it is the same task.
func setTask(m *providersdk.Machine, task providersdk.Task) {
	switch {
	case !task.InFlight():
		m.Task = providersdk.Task{}
	case task.Ref != m.Task.Ref || task.Operation != m.Task.Operation:
		task.StartedAt = time.Now()
		m.Task = task
	}
}

// record writes what the reconciler writes of an Observation to the machine: its
// details to status.proxmox and its provider ID to spec.providerID.
func record(t *testing.T, m *providersdk.Machine, o providersdk.Observation) {
	t.Helper()
	recordDetails(t, m, o.Details)
	if o.ProviderID != "" {
		m.Spec.ProviderID = o.ProviderID
	}
}

// recordDetails writes an Observation's or a CreateResult's details to the machine's
// status.proxmox, as the reconciler does.
func recordDetails(t *testing.T, m *providersdk.Machine, details any) {
	t.Helper()
	if d, ok := details.(*infrav1.ProxmoxStatus); ok && d != nil {
		setStatusBlock(t, m, *d)
	}
}

// observeThen is one pass of the reconciler for the machine: Observe (whose details
// are recorded), then, when no task is in flight and op is due, op handed that
// Observation: OperationCreate when no VM exists, OperationUpdate when it is not up to
// date, OperationDelete when it exists. It returns the Observation and the task in
// flight afterwards, op's or Observe's; Create's details are recorded.
func observeThen(t *testing.T, s *session, m *providersdk.Machine, op string) (providersdk.Observation, providersdk.Task, error) {
	t.Helper()
	ctx := context.Background()
	o, err := s.Observe(ctx, m)
	if err != nil {
		return o, providersdk.Task{}, fmt.Errorf("Observe: %w", err)
	}
	record(t, m, o)
	if o.Task.InFlight() {
		return o, o.Task, nil
	}
	switch {
	case op == providersdk.OperationCreate && !o.Exists:
		res, err := s.Create(ctx, m, o)
		recordDetails(t, m, res.Details)
		return o, res.Task, err
	case op == providersdk.OperationUpdate && o.Exists && !o.UpToDate:
		res, err := s.Update(ctx, m, o)
		return o, res.Task, err
	case op == providersdk.OperationDelete && o.Exists:
		res, err := s.Delete(ctx, m, o)
		return o, res.Task, err
	}
	return o, providersdk.Task{}, nil
}

// observeCreate is Observe, then Create when no VM exists, as the reconciler does.
func observeCreate(t *testing.T, s *session, m *providersdk.Machine) (providersdk.Task, error) {
	t.Helper()
	_, task, err := observeThen(t, s, m, providersdk.OperationCreate)
	return task, err
}

// observeUpdate is Observe, then Update when the VM is not up to date.
func observeUpdate(t *testing.T, s *session, m *providersdk.Machine) (providersdk.Task, error) {
	t.Helper()
	_, task, err := observeThen(t, s, m, providersdk.OperationUpdate)
	return task, err
}

// observeDelete is Observe, then Delete when the VM exists.
func observeDelete(t *testing.T, s *session, m *providersdk.Machine) (providersdk.Task, error) {
	t.Helper()
	_, task, err := observeThen(t, s, m, providersdk.OperationDelete)
	return task, err
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
			res, err := s.Create(ctx, m, o)
			if err != nil {
				return o, fmt.Errorf("Create: %w", err)
			}
			recordDetails(t, m, res.Details)
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
		setTask(m, task)
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
