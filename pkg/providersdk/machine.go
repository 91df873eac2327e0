package providersdk

import (
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
	// OperationRelease removes a machine's identity marks from its VM (Releaser).
	OperationRelease = "release"
	// OperationAdopt writes a machine's identity marks on an existing VM (Adopter).
	OperationAdopt = "adopt"
)

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
	// Spec is the machine contract's part of the spec. For a machine owned by a Cluster
	// API Machine it is what that Machine decides (see the package doc): FailureDomain
	// is the Machine's when the machine has none, and UserData names the Machine's
	// bootstrap data Secret, key "value", once it has one; the stored machine is not
	// rewritten.
	Spec infrav1.MachineSpec
	// Object is the whole machine, for the backend's own blocks. Drivers must not
	// modify it. It may be nil in a driver's own tests.
	Object *unstructured.Unstructured
	// UserData is the payload of Spec.UserData's Secret key: spec.userData's, or the
	// owning Cluster API Machine's bootstrap data. The Reconciler reads it only before
	// Create, so it is nil in every other call.
	UserData []byte
	// Task is the backend task recorded in the machine's status.task, if any: Observe
	// polls it and reports it again while it runs.
	Task Task
	// Deleting is true when the machine is being deleted (it has a deletion timestamp).
	Deleting bool
	// ClusterID identifies the cluster the machine lives in (the UID of namespace
	// kube-system; Sessions.ClusterID). A driver writes it into the marks of the VMs it
	// creates or adopts, beside the machine's UID, and reports it in MarkedVM.ClusterID,
	// so that a Provider's orphanPolicy Delete never deletes another cluster's VM that
	// shares the backend. It may be "" in a driver's own tests: no cluster is marked.
	ClusterID string
}

// Releasing reports whether the machine is deleted under spec.deletionPolicy Retain:
// its VM is let go (Releaser), not deleted. Observe then reports a VM found without
// the machine's identity marks as not there (Exists false), for that VM was released
// by an earlier Release, whose end the provider may not have recorded.
func (m *Machine) Releasing() bool { return m.Deleting && m.Spec.Retains() }

// DesiredPower is the power state the machine asks for: spec.powerState, PoweredOn
// when unset.
func (m *Machine) DesiredPower() banlieuev1.PowerState {
	if m.Spec.PowerState == "" {
		return banlieuev1.PowerStatePoweredOn
	}
	return m.Spec.PowerState
}

// Options decodes spec.<field>, the backend's own block of the machine's spec (the
// escape hatch, e.g. spec.vsphere), into into. A missing block leaves into unchanged; a
// block that does not decode is a PermanentError with reason InvalidOptions, which
// retrying cannot fix until the machine is edited.
func (m *Machine) Options(field string, into any) error {
	if err := m.SpecField(field, into); err != nil {
		return Permanent(infrav1.MachineInvalidOptionsReason, "spec.%s does not decode: %s", field, err.Error())
	}
	return nil
}

// SpecField decodes spec.<name>, a backend's own block, into into. A missing field
// (or a Machine without Object) leaves into unchanged.
func (m *Machine) SpecField(name string, into any) error { return m.field("spec", name, into) }

// StatusField decodes status.<name>, the block Observation.Details are written to (see
// WithStatusBlock), into into: what the provider last recorded, and the one place a
// driver finds its VM's backend references again. A missing field (or a Machine
// without Object) leaves into unchanged.
func (m *Machine) StatusField(name string, into any) error { return m.field("status", name, into) }

// field decodes <section>.<name> of the machine into into.
func (m *Machine) field(section, name string, into any) error {
	if m.Object == nil {
		return nil
	}
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

// TimedOut reports whether t, recorded since StartedAt, has run for timeout by now: the
// deadline of a wait the backend does not time itself, such as a guest's shutdown
// before the VM is powered off. A task just recorded (no StartedAt yet) has not.
func (t Task) TimedOut(now time.Time, timeout time.Duration) bool {
	return !t.StartedAt.IsZero() && now.Sub(t.StartedAt) >= timeout
}

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
	// Task is the backend task in flight for the VM, if any. A recorded task that still
	// runs is reported whether or not the VM is found: a destroy may take the VM out of
	// sight before it ends, and the Reconciler waits for the task before it lets the
	// machine go.
	Task Task
	// Details are the backend's own references to the VM (a managed object ID, a
	// domain UUID, a node and VMID), written to the machine's status block named by
	// WithStatusBlock. They are where the driver finds the VM again (StatusField).
	Details any
	// WaitingForGuest is true while the VM runs but its guest has not reported an
	// address yet: the Reconciler looks again after a growing interval, for a while
	// (WithGuestBackoff), or for a short window when the Client is a
	// GuestAddressReporter (WithGuestWindow), which the Provider controller then
	// watches for the address.
	WaitingForGuest bool
	// BootID identifies the VM's current boot, opaquely: it MUST change every time the
	// VM starts (a power-on, a reset the backend reports as one), MUST NOT change while
	// the VM runs (an Observe, a guest reboot inside the same boot), and MUST be
	// non-empty while the VM runs; it is ignored while the VM is not PoweredOn. The
	// Reconciler counts restarts by it (spec.restartRequestedAt). A driver that cannot
	// tell boots apart leaves it empty: its restart requests are then recorded as
	// Unsupported and the VM is left alone.
	BootID string
	// Hardware is the VM's shape as the backend reports it, written to the machine's
	// status.hardware; nil when the driver does not report it.
	Hardware *Hardware
	// PendingRestart describes, for a person, the hardware changes the backend cannot
	// make while the VM runs and that wait for its next power cycle (e.g. "CPUs from 2 to
	// 4"; PendingChanges picks them). The machine stays Ready and says
	// RestartRequired=True with them; they do not make the VM out of date: UpToDate
	// leaves them out. While the VM is off, or about to be powered off, nothing is
	// pending: Update makes the changes then.
	PendingRestart []string
	// Unclaimed is true, with Exists, when the machine adopts a VM (spec.adoptProviderID)
	// that carries no machine's identity mark yet: the Reconciler then calls
	// Adopter.Adopt. It is never set for a machine that does not adopt, nor for one
	// being deleted.
	Unclaimed bool
	// State is the driver's own record of what Observe read (the VM it found, the
	// listing it searched). The Reconciler hands it back untouched to the Create,
	// Update or Delete of the same reconcile and never stores it anywhere.
	State any
}

// CreateResult is what Create started.
type CreateResult struct {
	// Task is the backend task creating the VM, if it is asynchronous.
	Task Task
	// Details are the backend's references to the VM being made (where it will be),
	// written to the status block as Observation.Details are, so that the next Observe
	// reads the VM there instead of searching the backend for it.
	Details any
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
