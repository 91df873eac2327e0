package providersdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// This file is the worked example of docs/provider-authoring.md: a complete provider
// for "memcloud", an imaginary backend whose API is an in-memory map. The document
// quotes it; `go test ./pkg/providersdk/ -run Example` compiles and runs it.

// --- The machine kind ------------------------------------------------------------

// MemoryMachineSpec is the machine contract's spec plus memcloud's own block.
type MemoryMachineSpec struct {
	infrav1.MachineSpec `json:",inline"`

	// memcloud is the escape hatch: settings only memcloud understands.
	// +optional
	Memcloud *MemcloudMachineSpec `json:"memcloud,omitempty"`
}

// MemcloudMachineSpec is memcloud's own block of a MemoryMachine's spec.
type MemcloudMachineSpec struct {
	// rack pins the VM to one rack.
	// +optional
	Rack string `json:"rack,omitempty"`
}

// MemoryMachineStatus is the machine contract's status plus memcloud's references.
type MemoryMachineStatus struct {
	infrav1.MachineStatus `json:",inline"`

	// memcloud holds the backend's own references to the VM (Observation.Details).
	// +optional
	Memcloud *MemcloudMachineStatus `json:"memcloud,omitempty"`
}

// MemcloudMachineStatus is what memcloud calls the VM.
type MemcloudMachineStatus struct {
	// vmID is memcloud's identifier of the VM.
	VMID string `json:"vmID,omitempty"`
}

// MemoryMachine is an infrastructure machine of the memcloud provider.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
type MemoryMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine's desired state.
	Spec MemoryMachineSpec `json:"spec"`

	// status is the machine's observed state.
	// +optional
	Status MemoryMachineStatus `json:"status,omitempty,omitzero"`
}

// MachineKind is the kind the memcloud provider publishes in Provider.status.machineKind.
var MachineKind = schema.GroupVersionKind{Group: "infrastructure.memcloud.example.com", Version: "v1alpha1", Kind: "MemoryMachine"}

// --- The imaginary backend -------------------------------------------------------

// memcloud stands in for a real backend's API. A real driver talks to the backend
// through its client library instead; everything below the line "The driver" is what a
// provider writes.
type memcloud struct {
	mu        sync.Mutex
	token     string
	templates map[string]string // template name -> template ID
	vms       map[string]*memVM // VM ID -> VM
	tasks     map[string]int    // task ID -> polls left before it finishes
	next      int
}

type memVM struct {
	id, tag   string // tag holds the machine UID: the VM's identity
	name      string // "<namespace>-<name>": unique on memcloud, as VM names often are
	cpus      int32
	memoryMiB int64
	on        bool
	boots     int // power-ons since the VM was made
}

// --- The driver ------------------------------------------------------------------

// memDriver connects to memcloud endpoints. backends stands in for the network.
type memDriver struct {
	backends map[string]*memcloud
}

// Connect checks the Provider's endpoint and credentials and returns a session.
func (d *memDriver) Connect(_ context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	endpoint := info.Provider.Spec.Connection.Endpoint
	token, ok := info.Credentials["token"]
	if !ok {
		// Name the missing key, never a value: this becomes CredentialsInvalid.
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "the credentials Secret has no key %q", "token")
	}
	b, ok := d.backends[endpoint]
	if !ok {
		return nil, providersdk.Unreachable(fmt.Errorf("no memcloud answers at %s", endpoint))
	}
	if string(token) != b.token {
		return nil, providersdk.Unauthorized(errors.New("memcloud refused the token"))
	}
	return &memSession{b: b, storage: info.StorageClasses(), network: info.NetworkClasses()}, nil
}

// memSession is one session to one memcloud. Its methods are safe for concurrent use.
// Besides the lifecycle of a Client it is an InventoryReader and an ImageResolver, the
// optional interfaces the SDK finds by type assertion.
type memSession struct {
	b *memcloud
	// closed is set by Disconnect: a closed session reaches memcloud no more.
	closed atomic.Bool
	// storage and network are the Provider's classes with their targets (racks' disks
	// and VLANs); memcloud offers every one of them in its one rack.
	storage, network []providersdk.ClassTarget
}

var (
	_ providersdk.InventoryReader = (*memSession)(nil)
	_ providersdk.ImageResolver   = (*memSession)(nil)
)

// find returns the VM tagged with the machine's UID, or nil. Caller holds b.mu.
func (c *memSession) find(m *providersdk.Machine) *memVM {
	for _, vm := range c.b.vms {
		if vm.tag == string(m.UID) {
			return vm
		}
	}
	return nil
}

// Observe finds the VM by the machine's UID and reports it; it changes nothing. The VM
// it found travels in Observation.State to the Create, Update or Delete that follows.
func (c *memSession) Observe(_ context.Context, m *providersdk.Machine) (providersdk.Observation, error) {
	if err := c.open(); err != nil {
		return providersdk.Observation{}, err
	}
	defer c.b.mu.Unlock()
	if m.Task.InFlight() {
		left, ok := c.b.tasks[m.Task.Ref]
		switch {
		case !ok:
			return providersdk.Observation{}, providersdk.TaskFailed(m.Task, "memcloud forgot the task")
		case left > 0:
			c.b.tasks[m.Task.Ref] = left - 1 // the imaginary backend makes progress
			// The clone is making the VM: it exists as far as the SDK is concerned, so
			// a machine deleted meanwhile waits for it instead of leaving it behind.
			return providersdk.Observation{Exists: true, Task: m.Task}, nil
		}
	}
	vm := c.find(m)
	if vm == nil {
		return providersdk.Observation{}, nil
	}
	power, bootID := banlieuev1.PowerStatePoweredOff, ""
	if vm.on {
		// Each power-on is a new boot, with an ID of its own: what restarts count by.
		power, bootID = banlieuev1.PowerStatePoweredOn, fmt.Sprintf("%s-boot-%d", vm.id, vm.boots)
	}
	// memcloud adds CPUs and memory to a running VM; a decrease waits for its next
	// power cycle, which the machine reports with RestartRequired while it stays Ready.
	changes := providersdk.HardwareDiff(m.Spec, providersdk.Hardware{CPUs: vm.cpus, MemoryMiB: vm.memoryMiB})
	pending := providersdk.PendingChanges(changes, power, m.DesiredPower(), providersdk.HardwareChange.Increase)
	return providersdk.Observation{
		Exists:         true,
		UpToDate:       len(changes) == len(pending) && power == m.DesiredPower(),
		ProviderID:     "memcloud://" + vm.id,
		PowerState:     power,
		FailureDomain:  "rack-1",
		Details:        MemcloudMachineStatus{VMID: vm.id},
		State:          vm,
		BootID:         bootID,
		PendingRestart: providersdk.Descriptions(pending),
	}, nil
}

// vmNames are the names memcloud takes for a VM: a '.' among them, at most 80
// characters.
var vmNames = providersdk.NameRules{MaxLen: 80}

// Create clones the VM from its template, tagged with the machine's UID, and returns
// the clone as a task to poll. obs says no VM carries the UID: a VM an earlier Create
// made would have been found by its tag, so none is made twice.
func (c *memSession) Create(_ context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
	if obs.Exists {
		return providersdk.CreateResult{}, nil
	}
	var opts MemcloudMachineSpec
	if err := m.Options("memcloud", &opts); err != nil {
		return providersdk.CreateResult{}, err // a PermanentError: InvalidOptions
	}
	if err := c.open(); err != nil {
		return providersdk.CreateResult{}, err
	}
	defer c.b.mu.Unlock()
	if _, ok := c.b.templates[m.Spec.Image.Ref]; !ok {
		return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason,
			"template %q does not exist on memcloud", m.Spec.Image.Ref)
	}
	name := providersdk.BackendName(m.Namespace, m.Name, vmNames)
	for _, vm := range c.b.vms {
		if vm.name == name {
			// Not the machine's (Observe found none with its tag): never take it over.
			return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineNameConflictReason,
				"a VM named %q exists on memcloud and is not this machine's; rename or remove it", name)
		}
	}
	c.b.next++
	id := fmt.Sprintf("vm-%d", c.b.next)
	c.b.vms[id] = &memVM{id: id, tag: string(m.UID), name: name, cpus: m.Spec.Hardware.CPUs, memoryMiB: m.Spec.Hardware.MemoryMiB,
		on: m.DesiredPower() != banlieuev1.PowerStatePoweredOff}
	task := "task-" + id
	c.b.tasks[task] = 1
	// Where the VM will be, recorded in status.memcloud before the clone ends.
	return providersdk.CreateResult{Task: providersdk.Task{Ref: task, Operation: providersdk.OperationClone},
		Details: MemcloudMachineStatus{VMID: id}}, nil
}

// Update brings the VM Observe found (obs.State) in line with the spec, at once.
func (c *memSession) Update(_ context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
	vm, _ := obs.State.(*memVM)
	if vm == nil {
		return providersdk.UpdateResult{}, nil
	}
	if err := c.open(); err != nil {
		return providersdk.UpdateResult{}, err
	}
	defer c.b.mu.Unlock()
	// An increase at once; a decrease once the VM is off.
	if want := m.Spec.Hardware.CPUs; want > vm.cpus || !vm.on {
		vm.cpus = want
	}
	if want := m.Spec.Hardware.MemoryMiB; want > vm.memoryMiB || !vm.on {
		vm.memoryMiB = want
	}
	on := m.DesiredPower() != banlieuev1.PowerStatePoweredOff
	if on && !vm.on {
		vm.boots++
	}
	vm.on = on
	return providersdk.UpdateResult{}, nil
}

// Delete removes the VM Observe found; it succeeds when the VM is already gone.
func (c *memSession) Delete(_ context.Context, _ *providersdk.Machine, obs providersdk.Observation) (providersdk.DeleteResult, error) {
	if vm, _ := obs.State.(*memVM); vm != nil {
		if err := c.open(); err != nil {
			return providersdk.DeleteResult{}, err
		}
		defer c.b.mu.Unlock()
		delete(c.b.vms, vm.id)
	}
	return providersdk.DeleteResult{}, nil
}

// Inventory reports memcloud's one rack as a failure domain offering every storage and
// network class the Provider declares.
func (c *memSession) Inventory(context.Context) (providersdk.Inventory, error) {
	everywhere := func(map[string]string) bool { return true }
	return providersdk.Inventory{FailureDomains: []banlieuev1.FailureDomain{{
		Name: "rack-1", Labels: map[string]string{"rack": "1"},
		Attributes: banlieuev1.FailureDomainAttributes{
			AvailableStorageClasses: providersdk.AvailableClasses(c.storage, everywhere),
			AvailableNetworkClasses: providersdk.AvailableClasses(c.network, everywhere),
		},
	}}}, nil
}

// ResolveImage finds a Template source on memcloud; memcloud imports nothing.
func (c *memSession) ResolveImage(_ context.Context, img *providersdk.Image) (providersdk.ImageResult, error) {
	if img.Source.Kind != banlieuev1.ImageSourceTemplate {
		return providersdk.ImageResult{Reason: banlieuev1.ImageUnsupportedSourceReason,
			Message: fmt.Sprintf("memcloud has no %s images", img.Source.Kind)}, nil
	}
	if err := c.open(); err != nil {
		return providersdk.ImageResult{}, err
	}
	defer c.b.mu.Unlock()
	id, ok := c.b.templates[img.Source.Ref]
	if !ok {
		return providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason,
			Message: fmt.Sprintf("template %q does not exist on memcloud", img.Source.Ref)}, nil
	}
	return providersdk.ImageResult{Ready: true, ResolvedRef: id}, nil
}

// open locks memcloud for one call, or fails once the session is closed: a session
// never reaches its backend after Disconnect (see providersdk.Client).
func (c *memSession) open() error {
	if c.closed.Load() {
		return providersdk.ErrSessionClosed
	}
	c.b.mu.Lock()
	return nil
}

// Disconnect closes the session; memcloud holds none to end.
func (c *memSession) Disconnect(context.Context) error {
	c.closed.Store(true)
	return nil
}

// --- Wiring ----------------------------------------------------------------------

// ExampleSetup shows a third-party provider's main: one call registers the machine,
// Provider and VMImage controllers of the class.
func ExampleSetup() {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = banlieuev1.AddToScheme(scheme) // Providers and VMImages are read as typed objects
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:           scheme,
		LeaderElection:   true,
		LeaderElectionID: "banlieue-provider-memcloud.memcloud.example.com",
	})
	if err != nil {
		panic(err)
	}
	err = providersdk.Setup(mgr, providersdk.Config{
		Class:       "memcloud",
		MachineKind: MachineKind,
		Driver:      &memDriver{backends: map[string]*memcloud{}},
		StatusBlock: "memcloud", // Observation.Details go to status.memcloud
	})
	if err != nil {
		panic(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}

// ExampleDriver drives the memcloud driver by hand, as the Reconciler would: connect,
// observe, create with the observation, poll the task, observe again, update and
// delete with the observation each time.
func ExampleDriver() {
	ctx := context.Background()
	lab := &memcloud{token: "s3cret", templates: map[string]string{"ubuntu-22-04": "tpl-7"},
		vms: map[string]*memVM{}, tasks: map[string]int{}}
	var d providersdk.Driver = &memDriver{backends: map[string]*memcloud{"https://memcloud.lab": lab}}
	p := &banlieuev1.Provider{Spec: banlieuev1.ProviderSpec{Connection: banlieuev1.Connection{Endpoint: "https://memcloud.lab"}}}

	_, err := d.Connect(ctx, providersdk.ProviderInfo{Provider: p, Credentials: map[string][]byte{"token": []byte("wrong")}})
	fmt.Println("wrong token, unauthorized:", providersdk.IsUnauthorized(err))
	cl, err := d.Connect(ctx, providersdk.ProviderInfo{Provider: p, Credentials: map[string][]byte{"token": []byte("s3cret")}})
	if err != nil {
		panic(err)
	}

	m := &providersdk.Machine{UID: "0b8f-uid", Namespace: "team-a", Name: "db-01", Spec: infrav1.MachineSpec{
		Image:      infrav1.MachineImage{Name: "ubuntu-22-04", Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-22-04"},
		Hardware:   infrav1.MachineHardware{CPUs: 2, MemoryMiB: 4096},
		PowerState: banlieuev1.PowerStatePoweredOn,
	}}
	obs, _ := cl.Observe(ctx, m)
	fmt.Println("before create, exists:", obs.Exists)
	res, _ := cl.Create(ctx, m, obs)
	fmt.Println("create started task:", res.Task.Ref, res.Task.Operation)
	m.Task = res.Task // the Reconciler records it in status.task and hands it back
	obs, _ = cl.Observe(ctx, m)
	fmt.Println("poll, still in flight:", obs.Task.InFlight(), "exists:", obs.Exists)
	obs, _ = cl.Observe(ctx, m)
	m.Task = obs.Task
	fmt.Println("poll, done:", obs.Exists, obs.UpToDate, obs.ProviderID, obs.PowerState)
	res, _ = cl.Create(ctx, m, obs)
	fmt.Println("create again starts nothing:", !res.Task.InFlight())

	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	obs, _ = cl.Observe(ctx, m)
	fmt.Println("powered-off asked, up to date:", obs.UpToDate)
	_, _ = cl.Update(ctx, m, obs)
	obs, _ = cl.Observe(ctx, m)
	fmt.Println("after update:", obs.UpToDate, obs.PowerState)

	_, _ = cl.Delete(ctx, m, obs)
	_, err = cl.Delete(ctx, m, obs)
	obs, _ = cl.Observe(ctx, m)
	fmt.Println("deleted twice:", err == nil, "exists:", obs.Exists)

	img, _ := cl.(providersdk.ImageResolver).ResolveImage(ctx, &providersdk.Image{Name: "debian-12", Source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "debian-12"}})
	fmt.Println("image row:", img.Ready, img.Reason)
	// Output:
	// wrong token, unauthorized: true
	// before create, exists: false
	// create started task: task-vm-1 clone
	// poll, still in flight: true exists: true
	// poll, done: true true memcloud://vm-1 PoweredOn
	// create again starts nothing: true
	// powered-off asked, up to date: false
	// after update: true PoweredOff
	// deleted twice: true exists: false
	// image row: false TemplateNotFound
}
