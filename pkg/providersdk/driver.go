package providersdk

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Task operations the Reconciler knows a Ready reason for. A driver may use others;
// they are reported with the reason TaskInFlight.
const (
	// OperationCreate creates a VM from scratch.
	OperationCreate = "create"
	// OperationClone clones a VM from a template.
	OperationClone = "clone"
	// OperationUpdate changes a VM's power state or shape.
	OperationUpdate = "update"
	// OperationDelete deletes a VM.
	OperationDelete = "delete"
)

// ProviderInfo is what a Driver connects with: the Provider and its credentials.
type ProviderInfo struct {
	// Provider is the Provider the machine runs on. Drivers must not modify it.
	Provider *banlieuev1.Provider

	// Credentials is the data of the Secret in spec.connection.credentialsRef, or nil
	// when the Provider has none. It must never be logged or put in an error.
	Credentials map[string][]byte
}

// Driver connects to a backend. It is the one thing a provider writes.
type Driver interface {
	// Connect opens a session to the backend of info.Provider. The Reconciler caches
	// the Client and connects again when the Provider or its Secret changes.
	Connect(ctx context.Context, info ProviderInfo) (Client, error)
}

// Client is a session to one Provider's backend. Every method is idempotent and
// returns promptly: a long backend operation is reported as a Task and polled through
// Observe.
type Client interface {
	// Observe finds the machine's VM by the machine's UID and reports its state. It never
	// changes the backend.
	Observe(ctx context.Context, m *Machine) (Observation, error)

	// Create makes the machine's VM. It succeeds when the VM already exists.
	Create(ctx context.Context, m *Machine) (CreateResult, error)

	// Update brings an existing VM in line with the machine's spec.
	Update(ctx context.Context, m *Machine, o Observation) (UpdateResult, error)

	// Delete removes the machine's VM. It succeeds when the VM is already gone.
	Delete(ctx context.Context, m *Machine) (DeleteResult, error)

	// Disconnect closes the session.
	Disconnect(ctx context.Context) error
}

// Machine is the infrastructure machine a Client acts on.
type Machine struct {
	// UID is the machine's UID: the backend VM's stable identity.
	UID types.UID
	// Namespace is the machine's namespace.
	Namespace string
	// Name is the machine's name.
	Name string
	// Generation is the machine's metadata.generation.
	Generation int64
	// Spec is the machine contract's part of the spec.
	Spec infrav1.MachineSpec
	// Object is the whole machine, for the backend's own block. Drivers must not modify it.
	Object *unstructured.Unstructured
}

// SpecField decodes spec.<name>, a backend's own block, into into. A missing field
// leaves into unchanged.
func (m *Machine) SpecField(name string, into any) error {
	raw, ok, err := unstructured.NestedMap(m.Object.Object, "spec", name)
	if err != nil {
		return fmt.Errorf("failed to read spec.%s: %w", name, err)
	}
	if !ok {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, into); err != nil {
		return fmt.Errorf("failed to decode spec.%s: %w", name, err)
	}
	return nil
}

// Task is a backend task in flight. The zero Task means none.
type Task struct {
	// Ref is the backend's task identifier; "" when no task is in flight.
	Ref string
	// Operation is what the task does, e.g. OperationClone.
	Operation string
}

// InFlight reports whether t names a task.
func (t Task) InFlight() bool { return t.Ref != "" }

// Observation is what Observe found on the backend.
type Observation struct {
	// Exists is true when the backend has a VM for the machine.
	Exists bool
	// UpToDate is true when the VM matches the machine's spec.
	UpToDate bool
	// ProviderID is the VM's stable identifier, written to spec.providerID.
	ProviderID string
	// Addresses are the VM's addresses.
	Addresses []banlieuev1.MachineAddress
	// PowerState is the VM's power state.
	PowerState banlieuev1.PowerState
	// FailureDomain is where the VM runs.
	FailureDomain string
	// Task is the backend task in flight for the VM, if any.
	Task Task
}

// CreateResult is what Create started.
type CreateResult struct {
	// Task is the backend task creating the VM, if it is asynchronous.
	Task Task
}

// UpdateResult is what Update started.
type UpdateResult struct {
	// Task is the backend task updating the VM, if it is asynchronous.
	Task Task
}

// DeleteResult is what Delete started.
type DeleteResult struct {
	// Task is the backend task deleting the VM, if it is asynchronous.
	Task Task
}

// DriverFunc adapts a function to a Driver.
type DriverFunc func(ctx context.Context, info ProviderInfo) (Client, error)

// Connect calls f.
func (f DriverFunc) Connect(ctx context.Context, info ProviderInfo) (Client, error) {
	return f(ctx, info)
}

// ClientFns is a Client made of functions; a nil function does nothing and succeeds
// (Observe then reports that nothing exists).
type ClientFns struct {
	// ObserveFn implements Observe.
	ObserveFn func(ctx context.Context, m *Machine) (Observation, error)
	// CreateFn implements Create.
	CreateFn func(ctx context.Context, m *Machine) (CreateResult, error)
	// UpdateFn implements Update.
	UpdateFn func(ctx context.Context, m *Machine, o Observation) (UpdateResult, error)
	// DeleteFn implements Delete.
	DeleteFn func(ctx context.Context, m *Machine) (DeleteResult, error)
	// DisconnectFn implements Disconnect.
	DisconnectFn func(ctx context.Context) error
}

var _ Client = ClientFns{}

// Observe calls ObserveFn.
func (c ClientFns) Observe(ctx context.Context, m *Machine) (Observation, error) {
	if c.ObserveFn == nil {
		return Observation{}, nil
	}
	return c.ObserveFn(ctx, m)
}

// Create calls CreateFn.
func (c ClientFns) Create(ctx context.Context, m *Machine) (CreateResult, error) {
	if c.CreateFn == nil {
		return CreateResult{}, nil
	}
	return c.CreateFn(ctx, m)
}

// Update calls UpdateFn.
func (c ClientFns) Update(ctx context.Context, m *Machine, o Observation) (UpdateResult, error) {
	if c.UpdateFn == nil {
		return UpdateResult{}, nil
	}
	return c.UpdateFn(ctx, m, o)
}

// Delete calls DeleteFn.
func (c ClientFns) Delete(ctx context.Context, m *Machine) (DeleteResult, error) {
	if c.DeleteFn == nil {
		return DeleteResult{}, nil
	}
	return c.DeleteFn(ctx, m)
}

// Disconnect calls DisconnectFn.
func (c ClientFns) Disconnect(ctx context.Context) error {
	if c.DisconnectFn == nil {
		return nil
	}
	return c.DisconnectFn(ctx)
}

// NopClient is a Client that does nothing: Observe reports that no VM exists and every
// other call succeeds.
type NopClient struct{}

var _ Client = NopClient{}

// Observe reports that no VM exists.
func (NopClient) Observe(context.Context, *Machine) (Observation, error) { return Observation{}, nil }

// Create does nothing.
func (NopClient) Create(context.Context, *Machine) (CreateResult, error) { return CreateResult{}, nil }

// Update does nothing.
func (NopClient) Update(context.Context, *Machine, Observation) (UpdateResult, error) {
	return UpdateResult{}, nil
}

// Delete does nothing.
func (NopClient) Delete(context.Context, *Machine) (DeleteResult, error) { return DeleteResult{}, nil }

// Disconnect does nothing.
func (NopClient) Disconnect(context.Context) error { return nil }

// NopDriver is a Driver whose every session is a NopClient.
type NopDriver struct{}

// Connect returns a NopClient.
func (NopDriver) Connect(context.Context, ProviderInfo) (Client, error) { return NopClient{}, nil }
