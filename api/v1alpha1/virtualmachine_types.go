package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualMachineFinalizer is the core controller's finalizer on VirtualMachines: it is
// removed once the VM's infrastructure machine is gone.
const VirtualMachineFinalizer = "banlieue.io/virtualmachine"

// MigrateAnnotation is the annotation that, set to "true" on a VM with migrationPolicy
// manual, allows the core controller to move it to its new placement.
const MigrateAnnotation = "banlieue.io/migrate"

// MigrationPolicy says what happens when a VM's placement is no longer valid.
// +kubebuilder:validation:Enum=automatic;manual;never
type MigrationPolicy string

const (
	// MigrationPolicyAutomatic deletes the old machine, waits until it is gone and creates a new one.
	MigrationPolicyAutomatic MigrationPolicy = "automatic"
	// MigrationPolicyManual waits for the banlieue.io/migrate annotation before doing the same.
	MigrationPolicyManual MigrationPolicy = "manual"
	// MigrationPolicyNever keeps the old machine and reports PlacementValid=False.
	MigrationPolicyNever MigrationPolicy = "never"
)

// ClassUpdatePolicy says whether a VM takes the edits of its VMClass.
// +kubebuilder:validation:Enum=Pinned;Follow
type ClassUpdatePolicy string

const (
	// ClassUpdatePolicyPinned builds the VM's machine from the copy of the class in
	// status.appliedClass; an edit of the VMClass changes nothing until classRef names
	// another class.
	ClassUpdatePolicyPinned ClassUpdatePolicy = "Pinned"
	// ClassUpdatePolicyFollow applies each new generation of the VMClass to the VM.
	ClassUpdatePolicyFollow ClassUpdatePolicy = "Follow"
)

// DeletionPolicy says what happens to a VM's backend VM when the VM is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// DeletionPolicyDelete destroys the backend VM with its disks.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain leaves the backend VM as it is (power, disks, volumes) and
	// removes only banlieue's identity marks from it: banlieue no longer manages it.
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// AntiAffinityMode says whether an anti-affinity term must hold or is only preferred.
// +kubebuilder:validation:Enum=required;preferred
type AntiAffinityMode string

const (
	// AntiAffinityRequired terms rule a failure domain out.
	AntiAffinityRequired AntiAffinityMode = "required"
	// AntiAffinityPreferred terms only rank failure domains.
	AntiAffinityPreferred AntiAffinityMode = "preferred"
)

// Phase is a one-word summary of a VM's lifecycle, for people; programs use conditions.
// +kubebuilder:validation:Enum=Pending;Scheduling;Provisioning;Running;Stopped;Migrating;Deleting;Failed
type Phase string

const (
	// PhasePending means the VM waits before it can be placed: for its VMClass or
	// VMImage to exist, or, paused from its creation, to be unpaused.
	PhasePending Phase = "Pending"
	// PhaseScheduling means no placement has been found yet.
	PhaseScheduling Phase = "Scheduling"
	// PhaseProvisioning means the infrastructure machine exists but is not ready.
	PhaseProvisioning Phase = "Provisioning"
	// PhaseRunning means the machine is ready and powered on.
	PhaseRunning Phase = "Running"
	// PhaseStopped means the machine is ready and powered off or suspended.
	PhaseStopped Phase = "Stopped"
	// PhaseMigrating means the old machine is being removed before the VM moves.
	PhaseMigrating Phase = "Migrating"
	// PhaseDeleting means the VM is being deleted.
	PhaseDeleting Phase = "Deleting"
	// PhaseFailed means the infrastructure machine reported a failure that retrying
	// cannot fix (its status.failureReason): it needs a person to change the VM, its
	// class or its image.
	PhaseFailed Phase = "Failed"
)

// VirtualMachineSpec is what the user asks for: a class, an image and where to run.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.restartRequestedAt) || (has(self.restartRequestedAt) && self.restartRequestedAt >= oldSelf.restartRequestedAt)",message="restartRequestedAt only moves forward; set it to the current time to ask for a restart"
// +kubebuilder:validation:XValidation:rule="has(self.adoptProviderID) == has(oldSelf.adoptProviderID) && (!has(self.adoptProviderID) || self.adoptProviderID == oldSelf.adoptProviderID)",message="adoptProviderID is set when the VirtualMachine is created and cannot be added, changed or removed"
// +kubebuilder:validation:XValidation:rule="has(self.imageRef) || has(self.adoptProviderID)",message="imageRef is required, unless the VM adopts an existing backend VM with adoptProviderID"
// +kubebuilder:validation:XValidation:rule="!has(self.adoptProviderID) || self.migrationPolicy == 'never'",message="an adopted VM cannot be recreated elsewhere: set migrationPolicy to never"
// +kubebuilder:validation:XValidation:rule="!has(self.adoptProviderID) || !has(self.userData)",message="an adopted VM has booted already; userData is only for VMs banlieue creates"
type VirtualMachineSpec struct {
	// classRef names the VMClass (hardware and networks) of the VM. Changing it resizes
	// the VM where it runs: disks only grow or are added, and the firmware and network
	// interfaces stay as they are; the condition ClassApplied says whether the class
	// was applied and, if not, why.
	// +required
	ClassRef LocalObjectReference `json:"classRef,omitempty,omitzero"`

	// classUpdatePolicy says whether edits of the VMClass reach the VM: Pinned (the
	// default) keeps the copy of the class recorded in status.appliedClass until
	// classRef names another class; Follow applies each new generation of the class.
	// +optional
	// +default="Pinned"
	ClassUpdatePolicy ClassUpdatePolicy `json:"classUpdatePolicy,omitempty"`

	// imageRef names the VMImage the VM boots from. It is required, unless the VM adopts
	// an existing backend VM (adoptProviderID), which came from no banlieue image.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="imageRef is immutable; create a new VirtualMachine to change the image"
	ImageRef LocalObjectReference `json:"imageRef,omitempty,omitzero"`

	// adoptProviderID names an existing backend VM that banlieue takes over instead of
	// making one, by its provider ID as status.providerID reports it:
	// vsphere://<BIOS UUID>, libvirt://<host>/<domain UUID> or proxmox://<cluster>/<vmid>.
	// The VM is placed on the one Provider whose status.providerIDPrefix starts the ID
	// and whose adoptionPolicy is Enabled; it is neither cloned nor rebooted. Its
	// provider marks it as this VM's and refuses it when another machine manages it
	// already. The class's hardware then applies as for any VM: growth online or at the
	// next restart, never a shrink. It is set at creation only, requires
	// migrationPolicy never and leaves out userData.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z][a-z0-9+.-]*://[^/[:space:]]+(/[^[:space:]]+)?$')",message="adoptProviderID must be a provider ID such as vsphere://<uuid>, libvirt://<host>/<uuid> or proxmox://<cluster>/<vmid>"
	AdoptProviderID string `json:"adoptProviderID,omitempty"`

	// placement constrains which Provider and failure domain the VM runs on; leave it
	// out rather than empty, which constrains nothing.
	// +optional
	Placement Placement `json:"placement,omitempty,omitzero"`

	// desiredPowerState is PoweredOn (the default), PoweredOff or Suspended.
	// +optional
	// +default="PoweredOn"
	DesiredPowerState PowerState `json:"desiredPowerState,omitempty"`

	// userData references the cloud-init, Ignition or sysprep payload for the guest.
	// +optional
	UserData UserData `json:"userData,omitempty,omitzero"`

	// migrationPolicy says what happens when the placement is no longer valid: automatic
	// (the default), manual or never.
	// +optional
	// +default="automatic"
	MigrationPolicy MigrationPolicy `json:"migrationPolicy,omitempty"`

	// deletionPolicy says what deleting the VirtualMachine does to its backend VM:
	// Delete (the default) destroys it with its disks; Retain leaves it running as it is,
	// disks and volumes included, and removes only banlieue's marks from it, so that
	// banlieue no longer manages it. It may be changed at any time, also just before or
	// while the VM is deleted; a migration always deletes the old backend VM. A Provider
	// whose driver cannot release a VM keeps a Retain VM's machine with Ready=False,
	// reason RetainNotSupported, until the policy is set to Delete.
	// +optional
	// +default="Delete"
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// paused stops the core controller from acting on the VM and its machine; unset
	// means false.
	// +optional
	Paused *bool `json:"paused,omitempty"`

	// restartRequestedAt asks for one restart (a power cycle: guest shutdown, power-off
	// after the provider's timeout, power-on) each time it is set to a new time; it only
	// moves forward. status.restart says when it was honoured.
	// +optional
	RestartRequestedAt *metav1.Time `json:"restartRequestedAt,omitempty"`
}

// RestartResult says how a restart request was honoured.
// +kubebuilder:validation:Enum=Restarted;Skipped;Unsupported
type RestartResult string

const (
	// RestartResultRestarted means the VM was powered off and runs a new boot.
	RestartResultRestarted RestartResult = "Restarted"
	// RestartResultSkipped means no restart was needed: the VM was made after the
	// request, or its desiredPowerState was not PoweredOn.
	RestartResultSkipped RestartResult = "Skipped"
	// RestartResultUnsupported means the VM's provider reports no boot ID, so it cannot
	// tell a new boot from the old one; it did not touch the VM.
	RestartResultUnsupported RestartResult = "Unsupported"
)

// RestartStatus is the last restart request that was honoured.
type RestartStatus struct {
	// requestedAt is the spec.restartRequestedAt that was honoured.
	// +required
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`

	// completedAt is when the restart ended, or was skipped.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// result is Restarted, Skipped or Unsupported; unset while the restart is under way.
	// +optional
	Result RestartResult `json:"result,omitempty"`
}

// Placement constrains where a VM runs.
//
// +kubebuilder:validation:MinProperties=1
type Placement struct {
	// providerSelector selects the Providers the VM may be placed on; all when unset.
	// +optional
	ProviderSelector *LabelSelector `json:"providerSelector,omitempty"`

	// failureDomainSelector selects failure domains by their labels; all when unset.
	// +optional
	FailureDomainSelector *LabelSelector `json:"failureDomainSelector,omitempty"`

	// antiAffinity keeps the VM away from other VMs in the same namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	AntiAffinity []AntiAffinityTerm `json:"antiAffinity,omitempty"`
}

// AntiAffinityTerm keeps a VM out of the topology domains that already run matching VMs.
type AntiAffinityTerm struct {
	// topologyKey is a failure-domain label (e.g. host or cluster); two VMs are in the
	// same topology domain when their failure domains have the same value for it.
	// The key "provider" means the Provider itself.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	TopologyKey string `json:"topologyKey,omitempty"`

	// labelSelector selects the VMs, in the VM's namespace, to keep away from.
	// +required
	LabelSelector *LabelSelector `json:"labelSelector,omitempty"`

	// mode is required (the default: domains that break the term are ruled out) or
	// preferred (such domains are only ranked lower).
	// +optional
	// +default="required"
	Mode AntiAffinityMode `json:"mode,omitempty"`
}

// ScheduledPlacement is where the core controller placed a VM.
type ScheduledPlacement struct {
	// providerName is the name of the chosen Provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ProviderName string `json:"providerName,omitempty"`

	// providerNamespace is the namespace of the chosen Provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ProviderNamespace string `json:"providerNamespace,omitempty"`

	// providerClass is the chosen Provider's class, e.g. vsphere.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ProviderClass string `json:"providerClass,omitempty"`

	// failureDomain is the chosen failure domain of that Provider; unset when the
	// Provider reports none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	FailureDomain string `json:"failureDomain,omitempty"`

	// scheduledAt is when this placement was chosen.
	// +optional
	ScheduledAt *metav1.Time `json:"scheduledAt,omitempty"`
}

// IsDefined reports whether the placement is set.
func (p ScheduledPlacement) IsDefined() bool { return p.ProviderName != "" }

// ContractVersionedObjectReference names an object through its API group, as Cluster API does.
type ContractVersionedObjectReference struct {
	// apiGroup is the object's API group.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup,omitempty"`

	// kind is the object's kind.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// name is the object's name, in the VM's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// IsDefined reports whether the reference is set.
func (r ContractVersionedObjectReference) IsDefined() bool { return r.Name != "" }

// VirtualMachineStatus is what the core controller observed of the VM.
//
// +kubebuilder:validation:MinProperties=1
type VirtualMachineStatus struct {
	// conditions are Ready, Scheduled, InfrastructureReady and PlacementValid.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// scheduled is the VM's current placement.
	// +optional
	Scheduled ScheduledPlacement `json:"scheduled,omitempty,omitzero"`

	// infrastructureRef names the infrastructure machine that carries the VM.
	// +optional
	InfrastructureRef ContractVersionedObjectReference `json:"infrastructureRef,omitempty,omitzero"`

	// providerID is the backend's stable identifier of the VM, e.g. vsphere://<uuid>.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// initialization reports whether the backend VM has been provisioned.
	// +optional
	Initialization Initialization `json:"initialization,omitempty,omitzero"`

	// addresses are the VM's addresses as its provider reports them.
	// +optional
	// +listType=atomic
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// observedPowerState is the power state the provider last observed.
	// +optional
	ObservedPowerState PowerState `json:"observedPowerState,omitempty"`

	// hardware is the VM's CPUs, memory and disk sizes as its provider last observed
	// them: the class's once it is applied, an adopted VM's own until then.
	// +optional
	Hardware ObservedHardware `json:"hardware,omitempty,omitzero"`

	// phase is a one-word summary of the VM's lifecycle.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// appliedClass is the copy of the VMClass the VM's machine is built from. It is
	// recorded before the machine is changed, and is taken anew from the VMClass only
	// when classRef names another class, or when classUpdatePolicy is Follow and the
	// class's generation moved on.
	// +optional
	AppliedClass AppliedClass `json:"appliedClass,omitempty,omitzero"`

	// restart is the last restart request the VM's provider took up, as its machine
	// reports it.
	// +optional
	Restart RestartStatus `json:"restart,omitempty,omitzero"`

	// observedGeneration is the generation the core controller last reconciled.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// AppliedClass is the copy of a VMClass that a VM's machine is built from.
type AppliedClass struct {
	// name is the VMClass the copy was taken from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// generation is the VMClass's metadata.generation when the copy was taken.
	// +required
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation,omitempty"`

	// hardware is the class's CPUs, memory and disks, as applied.
	// +required
	Hardware Hardware `json:"hardware,omitempty,omitzero"`

	// network is the class's network interfaces, as applied.
	// +optional
	Network Network `json:"network,omitempty,omitzero"`

	// firmware is the class's boot firmware, as applied.
	// +optional
	Firmware Firmware `json:"firmware,omitempty"`

	// features are the backend features the class needs, as applied.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Features []string `json:"features,omitempty"`
}

// IsDefined reports whether a class has been applied.
func (c AppliedClass) IsDefined() bool { return c.Name != "" }

// VirtualMachine is a VM that banlieue places on a Provider and keeps in the state asked for.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vm,categories=banlieue
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.classRef.name`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.imageRef.name`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.status.scheduled.providerName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.observedPowerState`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.addresses[?(@.type=="InternalIP")].address`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachine struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the user asks for.
	// +required
	Spec VirtualMachineSpec `json:"spec,omitempty,omitzero"`

	// status is what the core controller observed.
	// +optional
	Status VirtualMachineStatus `json:"status,omitempty,omitzero"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

func init() { objectTypes = append(objectTypes, &VirtualMachine{}, &VirtualMachineList{}) }
