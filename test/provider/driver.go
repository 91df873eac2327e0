package provider

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// Finalizer is the test provider's finalizer on its machines.
const Finalizer = "infrastructure.test.banlieue.io/testmachine"

// ProviderClass is the provider class the test provider serves.
const ProviderClass = "test"

// MachineKind is what a Provider of the test class publishes in status.machineKind.
var MachineKind = banlieuev1.MachineKind{APIGroup: testv1.GroupVersion.Group, Version: testv1.GroupVersion.Version, Kind: "TestMachine"}

// Address is the address every test VM reports.
const Address = "192.0.2.10"

// MissingTemplate is an image ref the test backend has no template for: Create refuses
// a machine of it with a PermanentError (TemplateNotFound), as a real backend does.
const MissingTemplate = "no-such-template"

// VM is a backend VM of the test provider.
type VM struct {
	// ProviderID is the VM's stable identifier, test://<machine UID>.
	ProviderID string
	// PowerState is the VM's power state.
	PowerState banlieuev1.PowerState
	// FailureDomain is where the VM was created.
	FailureDomain string
	// Released is true once a Release removed the machine's mark: the VM stays on the
	// backend, and no machine finds it any more.
	Released bool
	// Starts counts the VM's starts (its creation powered on, and each power-on); its
	// BootID while it runs is "boot-<Starts>".
	Starts int
	// PowerOffs counts the VM's power-offs.
	PowerOffs int
	// CPUs is the VM's CPU count: the machine's at creation, changed to the machine's
	// only while the VM is off, as on a backend without hot-add.
	CPUs int32
}

// BootID is the VM's boot ID as Observe reports it: "" unless it runs.
func (vm VM) BootID() string {
	if vm.PowerState != banlieuev1.PowerStatePoweredOn {
		return ""
	}
	return fmt.Sprintf("boot-%d", vm.Starts)
}

// setPower changes the VM's power state, counting starts and power-offs.
func (vm *VM) setPower(p banlieuev1.PowerState) {
	switch {
	case p == vm.PowerState:
		return
	case p == banlieuev1.PowerStatePoweredOn:
		vm.Starts++
	case vm.PowerState == banlieuev1.PowerStatePoweredOn:
		vm.PowerOffs++
	}
	vm.PowerState = p
}

// Driver is the test provider's providersdk.Driver. Its backend is a map of VMs keyed by
// machine UID that outlives its sessions, as a real backend outlives a provider process.
type Driver struct {
	mu  sync.Mutex
	vms map[types.UID]VM
	// unmanaged are VMs no machine made or claimed, by provider ID: what a machine may
	// adopt.
	unmanaged map[string]VM
	creates   int
}

var _ providersdk.Driver = &Driver{}

// NewDriver returns a Driver with an empty backend.
func NewDriver() *Driver { return &Driver{vms: map[types.UID]VM{}, unmanaged: map[string]VM{}} }

// ProviderIDPrefix starts the provider ID of every test VM.
const ProviderIDPrefix = "test://"

// AddUnmanaged puts on the backend a running VM of cpus CPUs that no machine made, as
// a person would, and returns its provider ID, for a machine to adopt.
func (d *Driver) AddUnmanaged(name string, cpus int32) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	vm := VM{ProviderID: ProviderIDPrefix + "unmanaged-" + name, PowerState: banlieuev1.PowerStatePoweredOn, Starts: 1, CPUs: cpus}
	d.unmanaged[vm.ProviderID] = vm
	return vm.ProviderID
}

// Unmanaged returns the VM of providerID that no machine has claimed, if there is one.
func (d *Driver) Unmanaged(providerID string) (VM, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	vm, ok := d.unmanaged[providerID]
	return vm, ok
}

// NewReconciler returns the SDK's Reconciler for TestMachines, backed by d.
func NewReconciler(c client.Client, d *Driver, opts ...providersdk.Option) *providersdk.Reconciler {
	return providersdk.NewReconciler(c, testv1.GroupVersion.WithKind(MachineKind.Kind), d, append([]providersdk.Option{providersdk.WithFinalizer(Finalizer)}, opts...)...)
}

// Creates returns how many VMs the backend has created.
func (d *Driver) Creates() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.creates
}

// VM returns the backend VM of the machine with uid, if there is one.
func (d *Driver) VM(uid types.UID) (VM, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	vm, ok := d.vms[uid]
	return vm, ok
}

// Connect opens a session that honours the Provider's HoldReadyParameter and
// ReleaseParameter.
func (d *Driver) Connect(_ context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	s := &session{driver: d, holdReady: info.Provider.Spec.Parameters[testv1.HoldReadyParameter] == "true"}
	if info.Provider.Spec.Parameters[testv1.ReleaseParameter] == "true" {
		return &releasingSession{session: s}, nil
	}
	return s, nil
}

// session is one connection to the test backend. It is no InventoryReader nor
// ImageResolver, so the SDK gives its Providers one unnamed failure domain and takes
// every image as its source names it.
type session struct {
	providersdk.NopClient
	driver    *Driver
	holdReady bool
}

func cloneTask(m *providersdk.Machine) providersdk.Task {
	return providersdk.Task{Ref: "clone-" + string(m.UID), Operation: providersdk.OperationClone}
}

// Observe finds the machine's VM by UID. While the Provider holds machines from being
// ready, a VM reports a clone in flight.
func (s *session) Observe(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	vm, ok := s.driver.VM(m.UID)
	if m.Spec.Adopts() && (!ok || vm.ProviderID != m.Spec.AdoptProviderID) {
		return s.driver.observeUnclaimed(m)
	}
	if !ok || vm.Released {
		return providersdk.Observation{}, nil
	}
	if s.holdReady {
		return providersdk.Observation{Exists: true, UpToDate: true, ProviderID: vm.ProviderID, Task: cloneTask(m)}, nil
	}
	var changes []providersdk.HardwareChange
	if cpus := m.Spec.Hardware.CPUs; cpus > 0 && cpus != vm.CPUs {
		changes = append(changes, providersdk.HardwareChange{Kind: providersdk.ChangeCPUs, Disk: -1, From: int64(vm.CPUs), To: int64(cpus)})
	}
	pending := providersdk.PendingChanges(changes, vm.PowerState, m.Spec.PowerState, nil)
	return providersdk.Observation{
		Exists:         true,
		UpToDate:       vm.PowerState == m.Spec.PowerState && len(changes) == len(pending),
		PendingRestart: providersdk.Descriptions(pending),
		ProviderID:     vm.ProviderID,
		Addresses:      []banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: Address}},
		PowerState:     vm.PowerState,
		FailureDomain:  vm.FailureDomain,
		BootID:         vm.BootID(),
		Hardware:       &providersdk.Hardware{CPUs: vm.CPUs},
	}, nil
}

// Create makes the machine's VM unless it exists.
func (s *session) Create(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
	if m.Spec.Image.Ref == MissingTemplate {
		return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason, "template %q does not exist", m.Spec.Image.Ref)
	}
	d := s.driver
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.vms[m.UID]; !ok {
		vm := VM{ProviderID: "test://" + string(m.UID), PowerState: banlieuev1.PowerStatePoweredOff, FailureDomain: m.Spec.FailureDomain, CPUs: m.Spec.Hardware.CPUs}
		vm.setPower(m.Spec.PowerState)
		d.vms[m.UID] = vm
		d.creates++
	}
	if s.holdReady {
		return providersdk.CreateResult{Task: cloneTask(m)}, nil
	}
	return providersdk.CreateResult{}, nil
}

// Update sets the VM's CPUs to the machine's while the VM is off, then its power state
// to the machine's.
func (s *session) Update(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.UpdateResult, error) {
	d := s.driver
	d.mu.Lock()
	defer d.mu.Unlock()
	if vm, ok := d.vms[m.UID]; ok {
		if vm.PowerState == banlieuev1.PowerStatePoweredOff && m.Spec.Hardware.CPUs > 0 {
			vm.CPUs = m.Spec.Hardware.CPUs
		}
		vm.setPower(m.Spec.PowerState)
		d.vms[m.UID] = vm
	}
	return providersdk.UpdateResult{}, nil
}

// Delete removes the VM, unless the machine carries HoldDeletionAnnotation: then the
// deletion stays in flight, as on a slow backend.
func (s *session) Delete(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.DeleteResult, error) {
	if err := held(m, providersdk.OperationDelete); err != nil {
		return providersdk.DeleteResult{}, err
	}
	d := s.driver
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.vms, m.UID)
	return providersdk.DeleteResult{}, nil
}

// observeUnclaimed reports the VM an adopting machine names that is not the machine's:
// unclaimed, another machine's, or none, as the Adopter contract says.
func (d *Driver) observeUnclaimed(m *providersdk.Machine) (providersdk.Observation, error) {
	id := m.Spec.AdoptProviderID
	d.mu.Lock()
	defer d.mu.Unlock()
	if vm, ok := d.unmanaged[id]; ok && !m.Deleting {
		return providersdk.Observation{Exists: true, Unclaimed: true, ProviderID: id, PowerState: vm.PowerState}, nil
	}
	for _, vm := range d.vms {
		if vm.ProviderID == id && !vm.Released && !m.Deleting {
			return providersdk.Observation{}, providersdk.AlreadyManaged(id)
		}
	}
	return providersdk.Observation{}, nil
}

var _ providersdk.Adopter = (*session)(nil)

// ProviderIDPrefix returns ProviderIDPrefix.
func (s *session) ProviderIDPrefix() string { return ProviderIDPrefix }

// Adopt makes the unclaimed VM the machine's, as it is: its power, boot and CPUs stay.
// Another machine that claimed it first wins.
func (s *session) Adopt(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.AdoptResult, error) {
	d := s.driver
	d.mu.Lock()
	defer d.mu.Unlock()
	vm, ok := d.unmanaged[m.Spec.AdoptProviderID]
	if !ok {
		return providersdk.AdoptResult{}, providersdk.AlreadyManaged(m.Spec.AdoptProviderID)
	}
	delete(d.unmanaged, vm.ProviderID)
	d.vms[m.UID] = vm
	return providersdk.AdoptResult{}, nil
}

// held keeps op (a delete or a release) in flight, as on a slow backend, while the
// machine carries HoldDeletionAnnotation; nil otherwise.
func held(m *providersdk.Machine, op string) error {
	if _, ok := m.Object.GetAnnotations()[testv1.HoldDeletionAnnotation]; ok {
		return providersdk.InFlight(op, op+"-"+string(m.UID))
	}
	return nil
}

// releasingSession is a session that is a providersdk.Releaser too.
type releasingSession struct{ *session }

// Release marks the VM released, unless the machine carries HoldDeletionAnnotation:
// then the release stays in flight, as on a slow backend.
func (s *releasingSession) Release(_ context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.ReleaseResult, error) {
	if err := held(m, providersdk.OperationRelease); err != nil {
		return providersdk.ReleaseResult{}, err
	}
	d := s.driver
	d.mu.Lock()
	defer d.mu.Unlock()
	if vm, ok := d.vms[m.UID]; ok {
		vm.Released = true
		d.vms[m.UID] = vm
	}
	return providersdk.ReleaseResult{}, nil
}
