package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// ContractVersion is the machine-contract version that the CRDs of this package
// implement; it is the value of their ContractLabel label.
const ContractVersion = "v1alpha1"

// ContractLabel marks an infrastructure machine CRD as implementing the banlieue machine contract.
const ContractLabel = "banlieue.io/machine-contract"

// PausedAnnotation is set by core on the machine of a paused VirtualMachine and removed
// when the VM is unpaused; the provider leaves a machine that carries it alone, as it does
// one with Cluster API's cluster.x-k8s.io/paused.
const PausedAnnotation = "banlieue.io/paused"

// ProviderRef names the Provider an infrastructure machine runs on.
type ProviderRef struct {
	// namespace of the Provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`

	// name of the Provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// MachineImage is the image source that core resolved for the machine's provider class.
type MachineImage struct {
	// name is the VMImage's name.
	// +required
	Name string `json:"name"`

	// kind is the source's kind: Template, BackingFile or Url.
	// +required
	Kind banlieuev1.ImageSourceKind `json:"kind"`

	// ref names the image on the backend.
	// +optional
	Ref string `json:"ref,omitempty"`

	// importFrom is the URL the image is imported from.
	// +optional
	ImportFrom string `json:"importFrom,omitempty"`

	// checksum is the image's digest.
	// +optional
	Checksum string `json:"checksum,omitempty"`

	// resolvedRef is the backend reference from the VMImage's row for this Provider.
	// +optional
	ResolvedRef string `json:"resolvedRef,omitempty"`
}

// MachineHardware is the compute shape of a machine.
type MachineHardware struct {
	// cpus is the number of virtual CPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	CPUs int32 `json:"cpus"`

	// memoryMiB is the memory size in MiB.
	// +required
	// +kubebuilder:validation:Minimum=1
	MemoryMiB int64 `json:"memoryMiB"`

	// firmware is bios, efi or efi-secure.
	// +optional
	Firmware banlieuev1.Firmware `json:"firmware,omitempty"`
}

// MachineDisk is one disk of a machine, with its storage class's target.
type MachineDisk struct {
	// name identifies the disk; the first disk is the boot disk.
	// +required
	Name string `json:"name"`

	// sizeGiB is the disk size in GiB.
	// +required
	// +kubebuilder:validation:Minimum=1
	SizeGiB int32 `json:"sizeGiB"`

	// provisioning is thin, thick or eagerZeroed.
	// +optional
	Provisioning banlieuev1.DiskProvisioning `json:"provisioning,omitempty"`

	// storageClass is the backend-neutral storage class.
	// +required
	StorageClass string `json:"storageClass"`

	// target is the storage class's backend objects, copied from the Provider.
	// +optional
	Target map[string]string `json:"target,omitempty"`
}

// MachineInterface is one network interface of a machine, with its network class's target.
type MachineInterface struct {
	// name identifies the interface.
	// +required
	Name string `json:"name"`

	// networkClass is the backend-neutral network class.
	// +required
	NetworkClass string `json:"networkClass"`

	// target is the network class's backend objects, copied from the Provider.
	// +optional
	Target map[string]string `json:"target,omitempty"`

	// ipam says how the interface gets its address.
	// +optional
	IPAM *banlieuev1.IPAM `json:"ipam,omitempty"`

	// mtu is the interface's MTU.
	// +optional
	MTU int32 `json:"mtu,omitempty"`
}

// MachineSpec is the part of every infrastructure machine's spec that the machine
// contract fixes. Core writes all of it but providerID, which the provider writes.
type MachineSpec struct {
	// providerRef names the Provider this machine runs on.
	// +required
	ProviderRef ProviderRef `json:"providerRef"`

	// failureDomain is the Provider's failure domain chosen for the machine.
	// +optional
	FailureDomain string `json:"failureDomain,omitempty"`

	// image is the image source for this machine's provider class.
	// +required
	Image MachineImage `json:"image"`

	// hardware is the machine's CPUs, memory and firmware.
	// +required
	Hardware MachineHardware `json:"hardware"`

	// disks are the machine's disks; the first one is the boot disk.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Disks []MachineDisk `json:"disks,omitempty"`

	// interfaces are the machine's network interfaces, in order.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	Interfaces []MachineInterface `json:"interfaces,omitempty"`

	// powerState is the power state the machine should be in.
	// +optional
	// +kubebuilder:default=PoweredOn
	PowerState banlieuev1.PowerState `json:"powerState,omitempty"`

	// userData references the guest's first-boot payload, in the machine's namespace.
	// +optional
	UserData *banlieuev1.UserData `json:"userData,omitempty"`

	// providerID is the backend's stable identifier of the VM, written by the provider.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
}

// TaskReference is a backend task that is in flight for a machine.
type TaskReference struct {
	// ref is the backend's task identifier: a vSphere task, a Proxmox UPID.
	// +required
	Ref string `json:"ref"`

	// operation is what the task does, e.g. create, delete or power.
	// +required
	Operation string `json:"operation"`

	// startedAt is when the provider started the task.
	// +optional
	StartedAt metav1.Time `json:"startedAt,omitempty,omitzero"`
}

// MachineStatus is the part of every infrastructure machine's status that the machine
// contract fixes. The provider writes all of it.
type MachineStatus struct {
	// initialization reports whether the backend VM has been provisioned.
	// +optional
	Initialization banlieuev1.Initialization `json:"initialization,omitempty,omitzero"`

	// addresses are the VM's addresses.
	// +optional
	// +listType=atomic
	Addresses []banlieuev1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain is where the VM actually runs.
	// +optional
	FailureDomain string `json:"failureDomain,omitempty"`

	// powerState is the VM's observed power state.
	// +optional
	PowerState banlieuev1.PowerState `json:"powerState,omitempty"`

	// task is the backend task in flight, if any.
	// +optional
	Task *TaskReference `json:"task,omitempty"`

	// failureReason is set, with failureMessage, while the provider has given up on the
	// machine until its spec changes: a failure that retrying cannot fix (a template
	// that does not exist, a disk asked to shrink). It is the Ready condition's reason
	// then, and core reports the VM as Failed. Transient failures never set it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureReason string `json:"failureReason,omitempty"`

	// failureMessage says, for a person, why the provider gave up and what to change.
	// +optional
	// +kubebuilder:validation:MaxLength=10240
	FailureMessage string `json:"failureMessage,omitempty"`

	// conditions must include Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the provider last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}
