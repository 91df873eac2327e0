package providersdk

import (
	"context"
	"fmt"
	"time"

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

	// CABundle is the PEM bundle from spec.connection.caBundle, whichever way it is
	// given, or nil when the Provider has none.
	CABundle []byte
}

// Driver connects to a backend. It is the one thing a provider writes.
type Driver interface {
	// Connect opens a session to the backend of info.Provider. The Reconciler caches
	// the Client and connects again when the Provider or its Secret changes. ctx bounds
	// the connection attempt only: the session must not keep it.
	Connect(ctx context.Context, info ProviderInfo) (Client, error)
}

// Client is a session to one Provider's backend, shared by concurrent reconciles, so
// its methods must be safe for concurrent use. Every method is idempotent and returns
// promptly: a long backend operation is reported as a Task and polled through Observe.
type Client interface {
	// Observe finds the machine's VM by the machine's UID and reports its state. It never
	// changes the backend.
	Observe(ctx context.Context, m *Machine) (Observation, error)

	// Create makes the machine's VM. It succeeds when the VM already exists.
	Create(ctx context.Context, m *Machine) (CreateResult, error)

	// Update brings an existing VM in line with the machine's spec. It may take one step
	// of several: a step returned without a Task is synchronous, and the Reconciler
	// observes the VM again and, while it is still not up to date, calls Update again in
	// the same reconcile, a few times at most.
	Update(ctx context.Context, m *Machine, o Observation) (UpdateResult, error)

	// Delete removes the machine's VM. It succeeds when the VM is already gone.
	Delete(ctx context.Context, m *Machine) (DeleteResult, error)

	// Inventory reports what the backend offers: its failure domains, each with the
	// Provider's storage and network classes whose targets exist there. The Provider
	// controller calls it on connect and then on a modest interval.
	Inventory(ctx context.Context) (Inventory, error)

	// ResolveImage finds, or imports, an image source on the backend. An import is
	// started in the background and reported, with its progress, on later calls.
	ResolveImage(ctx context.Context, img *Image) (ImageResult, error)

	// Disconnect closes the session.
	Disconnect(ctx context.Context) error
}

// GuestAddressReporter is an optional interface of a Client: a backend that can tell, in
// one bounded call for the whole Provider, which of its VMs' guests report an address.
//
// Without it, the Reconciler looks at each running VM whose guest has reported no
// address yet again and again, one backend round trip per VM per look, for about 25
// minutes (WithGuestBackoff): a guest with no operating system or no agent never reports
// one. With it, the Reconciler looks at such a VM only for a short window after it
// starts (WithGuestWindow) and then stops; the Provider controller, on its periodic
// inventory refresh, makes this one call when some Ready machine of the Provider has a
// providerID but no address, and wakes exactly the machines whose VM now reports one. A
// Provider of idle VMs then costs one call per refresh, whatever the number of VMs, and
// none when every running machine has its address.
type GuestAddressReporter interface {
	// GuestsWithAddresses returns the providerIDs (as Observation.ProviderID reports
	// them) of the Provider's VMs whose guests report at least one address that Observe
	// would put in Observation.Addresses. VMs of other Providers may be included; they
	// are ignored. It never changes the backend, and makes a bounded number of backend
	// calls whatever the number of VMs.
	GuestsWithAddresses(ctx context.Context) (map[string]bool, error)
}

// Inventory is what a backend offers to VMs.
type Inventory struct {
	// FailureDomains are the backend's failure domains, written to the Provider's status.
	FailureDomains []banlieuev1.FailureDomain
}

// Image is one VMImage's source for the Provider's class.
type Image struct {
	// Name is the VMImage's name.
	Name string
	// UID is the VMImage's UID.
	UID types.UID
	// Source is the image's source for the Provider's class.
	Source banlieuev1.ImageSource
}

// ImageResult is an image's state on one Provider; it becomes that Provider's row in
// the VMImage's status.perProvider.
type ImageResult struct {
	// Ready is true when VMs can be made from the image.
	Ready bool
	// ResolvedRef is the backend's own reference to the image, copied to machines.
	ResolvedRef string
	// Reason is a CamelCase word saying why the image is not ready.
	Reason string
	// Message says, for a person, why the image is not ready or how an import goes.
	Message string
	// InProgress is true while an import runs; the image is looked at again soon.
	InProgress bool
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
	// UserData is the payload of spec.userData's Secret key. The Reconciler reads it
	// only before Create, so it is nil in every other call.
	UserData []byte
	// Task is the backend task recorded in the machine's status.task, if any: Observe
	// polls it and reports it again while it runs.
	Task Task
}

// SpecField decodes spec.<name>, a backend's own block, into into. A missing field
// leaves into unchanged.
func (m *Machine) SpecField(name string, into any) error { return m.field("spec", name, into) }

// StatusField decodes status.<name>, the block Observation.Details are written to (see
// WithStatusBlock), into into: what the provider last recorded. A missing field leaves
// into unchanged.
func (m *Machine) StatusField(name string, into any) error { return m.field("status", name, into) }

// field decodes <section>.<name> of the machine into into.
func (m *Machine) field(section, name string, into any) error {
	raw, ok, err := unstructured.NestedMap(m.Object.Object, section, name)
	if err != nil {
		return fmt.Errorf("failed to read %s.%s: %w", section, name, err)
	}
	if !ok {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, into); err != nil {
		return fmt.Errorf("failed to decode %s.%s: %w", section, name, err)
	}
	return nil
}

// Task is a backend task in flight. The zero Task means none.
type Task struct {
	// Ref is the backend's task identifier; "" when no task is in flight.
	Ref string
	// Operation is what the task does, e.g. OperationClone.
	Operation string
	// StartedAt is when the task was first recorded; zero for a task just started.
	StartedAt time.Time
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
	// Details are the backend's own references to the VM (a managed object ID, a
	// domain UUID), written to the machine's status block named by WithStatusBlock.
	Details any
	// WaitingForGuest is true while the VM runs but its guest has not reported an
	// address yet: the Reconciler looks again after a growing interval, for a while
	// (WithGuestBackoff), or for a short window when the Client is a
	// GuestAddressReporter (WithGuestWindow), which the Provider controller then
	// watches for the address.
	WaitingForGuest bool
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
	// InventoryFn implements Inventory.
	InventoryFn func(ctx context.Context) (Inventory, error)
	// ResolveImageFn implements ResolveImage.
	ResolveImageFn func(ctx context.Context, img *Image) (ImageResult, error)
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

// Inventory calls InventoryFn.
func (c ClientFns) Inventory(ctx context.Context) (Inventory, error) {
	if c.InventoryFn == nil {
		return Inventory{}, nil
	}
	return c.InventoryFn(ctx)
}

// ResolveImage calls ResolveImageFn; without one the image is ready as its source names it.
func (c ClientFns) ResolveImage(ctx context.Context, img *Image) (ImageResult, error) {
	if c.ResolveImageFn == nil {
		return NopClient{}.ResolveImage(ctx, img)
	}
	return c.ResolveImageFn(ctx, img)
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

// Inventory reports no failure domains.
func (NopClient) Inventory(context.Context) (Inventory, error) { return Inventory{}, nil }

// ResolveImage reports the image ready, resolved to its source's ref.
func (NopClient) ResolveImage(_ context.Context, img *Image) (ImageResult, error) {
	return ImageResult{Ready: true, ResolvedRef: img.Source.Ref}, nil
}

// Disconnect does nothing.
func (NopClient) Disconnect(context.Context) error { return nil }

// NopDriver is a Driver whose every session is a NopClient.
type NopDriver struct{}

// Connect returns a NopClient.
func (NopDriver) Connect(context.Context, ProviderInfo) (Client, error) { return NopClient{}, nil }
