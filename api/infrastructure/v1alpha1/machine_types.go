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
	// namespace of the Provider, an RFC 1123 label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit (RFC 1123 label)"
	Namespace string `json:"namespace,omitempty"`

	// name of the Provider, an RFC 1123 subdomain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (RFC 1123 subdomain)"
	Name string `json:"name,omitempty"`
}

// MachineImage is the image source that core resolved for the machine's provider class.
// Its rules are those of the VMImage's source, word for word, so a machine written
// directly cannot ask for what a VMImage could not.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'Url' || !has(self.ref) || (self.ref.matches('^[A-Za-z0-9][-A-Za-z0-9_.]*$') && !self.ref.contains('..'))",message="a Url source's ref is the name the image is imported as (letters, digits, '-', '_' and '.'), never a URL or a path; put the URL in importFrom",fieldPath=".ref"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (isURL(self.importFrom) && url(self.importFrom).getScheme() in ['http', 'https'] && size(url(self.importFrom).getHostname()) != 0)",message="importFrom must be an http or https URL with a host, e.g. https://images.example.com/jammy.qcow2",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (!self.importFrom.matches('^[^:/?#]+://[^/?#]*@'))",message="importFrom must not contain a user name or password (user:password@host); serve the image from a URL that needs no credentials in it",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (!self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(169[.]254[.][0-9]+[.][0-9]+(:[0-9]*)?([/?#]|$)|[[]fe[89ab][0-9a-f]:)'))",message="importFrom must not name a link-local address (169.254.0.0/16 or fe80::/10), where cloud metadata endpoints live; import from an image server",fieldPath=".importFrom"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || ((!self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*[.]?(:[0-9]*)?([/?#]|$)') || self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(:[0-9]*)?([/?#]|$)')) && !self.importFrom.matches('(?i)^[^:/?#]+://([^/?#]*@)?[[]([^]/?#]*[.%]|[0:]*ffff:)'))",message="importFrom's host must be a DNS name or an IP address in its usual form, e.g. 192.0.2.10 or [2001:db8::10], without a zone",fieldPath=".importFrom"
type MachineImage struct {
	// name is the VMImage's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (RFC 1123 subdomain)"
	Name string `json:"name,omitempty"`

	// kind is the source's kind: Template, BackingFile or Url.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Kind banlieuev1.ImageSourceKind `json:"kind,omitempty"`

	// ref names the image on the backend; for a Url source, the name it is imported as.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="ref must not contain '..' path segments or control characters"
	Ref string `json:"ref,omitempty"`

	// importFrom is the http(s) URL the image is imported from, without a user name or
	// password and not on a link-local host.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	ImportFrom string `json:"importFrom,omitempty"`

	// checksum is the image's digest as "sha256:<hex>" or "sha512:<hex>".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=135
	// +kubebuilder:validation:XValidation:rule="self.matches('^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$')",message="checksum must be sha256:<64 lowercase hex digits> or sha512:<128 lowercase hex digits>"
	Checksum string `json:"checksum,omitempty"`

	// resolvedRef is the backend reference from the VMImage's row for this Provider.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.](/|$)') && !self.matches('[[:cntrl:]]')",message="resolvedRef must not contain '..' path segments or control characters"
	ResolvedRef string `json:"resolvedRef,omitempty"`
}

// MachineHardware is the compute shape of a machine.
type MachineHardware struct {
	// cpus is the number of virtual CPUs, from 1 to 768 as in a VMClass.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=768
	CPUs int32 `json:"cpus,omitempty"`

	// memoryMiB is the memory size in MiB, at least 128 and at most 24 TiB as in a VMClass.
	// +required
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=25165824
	MemoryMiB int64 `json:"memoryMiB,omitempty"`

	// firmware is bios, efi or efi-secure.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Firmware banlieuev1.Firmware `json:"firmware,omitempty"`
}

// MachineDisk is one disk of a machine, with its storage class's target.
type MachineDisk struct {
	// name identifies the disk; the first disk is the boot disk. It is an RFC 1123 label
	// as in a VMClass.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// sizeGiB is the disk size in GiB, from 1 to 65536.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	SizeGiB int32 `json:"sizeGiB,omitempty"`

	// provisioning is thin, thick or eagerZeroed.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Provisioning banlieuev1.DiskProvisioning `json:"provisioning,omitempty"`

	// storageClass is the backend-neutral storage class.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	StorageClass string `json:"storageClass,omitempty"`

	// target is the storage class's backend objects, copied from the Provider.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 63 && size(self[k]) <= 1024)",message="target keys must be at most 63 characters and values at most 1024"
	Target map[string]string `json:"target,omitempty"`
}

// MachineInterface is one network interface of a machine, with its network class's target.
type MachineInterface struct {
	// name identifies the interface, e.g. eth0; an RFC 1123 label as in a VMClass.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// networkClass is the backend-neutral network class.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	NetworkClass string `json:"networkClass,omitempty"`

	// target is the network class's backend objects, copied from the Provider.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 63 && size(self[k]) <= 1024)",message="target keys must be at most 63 characters and values at most 1024"
	Target map[string]string `json:"target,omitempty"`

	// ipam says how the interface gets its address.
	// +optional
	IPAM *banlieuev1.IPAM `json:"ipam,omitempty"`

	// mtu is the interface's MTU, from 576 to 9216; the network's default when unset.
	// +optional
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu,omitempty"`
}

// MachineSpec is the part of every infrastructure machine's spec that the machine
// contract fixes. Core writes all of it but providerID, which the provider writes.
type MachineSpec struct {
	// providerRef names the Provider this machine runs on.
	// +required
	ProviderRef ProviderRef `json:"providerRef,omitempty,omitzero"`

	// failureDomain is the Provider's failure domain chosen for the machine.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]/]')",message="failureDomain must be a failure domain name, without '/' or control characters"
	FailureDomain string `json:"failureDomain,omitempty"`

	// image is the image source for this machine's provider class; unset for a machine
	// that adopts an existing VM (adoptProviderID).
	// +optional
	Image MachineImage `json:"image,omitempty,omitzero"`

	// hardware is the machine's CPUs, memory and firmware.
	// +required
	Hardware MachineHardware `json:"hardware,omitempty,omitzero"`

	// disks are the machine's disks; the first one is the boot disk.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.filter(e, e.name == d.name).size() == 1)",message="disk names must be unique"
	// +listType=atomic
	Disks []MachineDisk `json:"disks,omitempty"`

	// interfaces are the machine's network interfaces, in order.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(i, self.filter(j, j.name == i.name).size() == 1)",message="interface names must be unique"
	// +listType=atomic
	Interfaces []MachineInterface `json:"interfaces,omitempty"`

	// powerState is the power state the machine should be in.
	// +optional
	// +default="PoweredOn"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	PowerState banlieuev1.PowerState `json:"powerState,omitempty"`

	// userData references the guest's first-boot payload, in the machine's namespace.
	// +optional
	UserData *banlieuev1.UserData `json:"userData,omitempty"`

	// providerID is the backend's stable identifier of the VM, written by the provider.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// adoptProviderID names the existing backend VM the machine takes over instead of
	// creating one; core copies the VirtualMachine's. The provider never creates a VM for
	// such a machine: it marks the VM the ID names as the machine's, unless another
	// machine's mark is on it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z][a-z0-9+.-]*://[^/[:space:]]+(/[^[:space:]]+)?$')",message="adoptProviderID must be a provider ID such as vsphere://<uuid>, libvirt://<host>/<uuid> or proxmox://<cluster>/<vmid>"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="adoptProviderID is immutable"
	AdoptProviderID string `json:"adoptProviderID,omitempty"`

	// deletionPolicy says what deleting the machine does to its backend VM: Delete (the
	// meaning of unset) destroys it; Retain removes only banlieue's marks from it and
	// leaves it running, or, when the provider cannot, keeps the machine with Ready=False,
	// reason RetainNotSupported. Core copies the VirtualMachine's value.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	DeletionPolicy banlieuev1.DeletionPolicy `json:"deletionPolicy,omitempty"`

	// restartRequestedAt asks for one restart (a power cycle) each time it moves
	// forward; core copies the VirtualMachine's.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="restartRequestedAt only moves forward; set it to the current time to ask for a restart"
	RestartRequestedAt *metav1.Time `json:"restartRequestedAt,omitempty"`
}

// MachineRestart is the provider's record of the restart request it took up last. It is
// written before the provider acts on the request, so that a provider that restarts
// finds where it was: powering off the boot recorded in bootID, or waiting for another.
type MachineRestart struct {
	// requestedAt is the spec.restartRequestedAt taken up.
	// +required
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`

	// bootID is the backend's boot ID of the VM when the request was taken up; empty
	// when the VM was not running. The restart is done once the VM runs another boot.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	BootID string `json:"bootID,omitempty"`

	// startedAt is when the request was taken up.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// completedAt is when the restart ended, or was skipped.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// result is Restarted, Skipped or Unsupported; unset while the restart is under way.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Result banlieuev1.RestartResult `json:"result,omitempty"`
}

// Retains reports whether deleting the machine should leave its backend VM in place.
func (s MachineSpec) Retains() bool { return s.DeletionPolicy == banlieuev1.DeletionPolicyRetain }

// Adopts reports whether the machine takes over an existing backend VM
// (adoptProviderID) instead of creating one.
func (s MachineSpec) Adopts() bool { return s.AdoptProviderID != "" }

// TaskReference is a backend task that is in flight for a machine.
type TaskReference struct {
	// ref is the backend's task identifier: a vSphere task, a Proxmox UPID.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Ref string `json:"ref,omitempty"`

	// operation is what the task does, e.g. create, delete or power.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Operation string `json:"operation,omitempty"`

	// startedAt is when the provider started the task.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
}

// IsDefined reports whether the task is set.
func (t TaskReference) IsDefined() bool { return t.Ref != "" }

// MachineInitialization reports the one-time steps of bringing a machine up, as Cluster
// API's InfraMachine contract names them.
//
// +kubebuilder:validation:MinProperties=1
type MachineInitialization struct {
	// provisioned is true once the backend VM exists and has been configured.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// ObjectMeta is the metadata a machine template gives the machines made from it: the
// part of metav1.ObjectMeta that a template can set.
//
// +kubebuilder:validation:MinProperties=1
type ObjectMeta struct {
	// labels are added to the machines made from the template.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to the machines made from the template.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// MachineStatus is the part of every infrastructure machine's status that the machine
// contract fixes. The provider writes all of it.
//
// +kubebuilder:validation:MinProperties=1
type MachineStatus struct {
	// conditions must include Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// initialization reports whether the backend VM has been provisioned.
	// +optional
	Initialization MachineInitialization `json:"initialization,omitempty,omitzero"`

	// addresses are the VM's addresses.
	// +optional
	// +listType=atomic
	Addresses []banlieuev1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain is where the VM actually runs.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	FailureDomain string `json:"failureDomain,omitempty"`

	// powerState is the VM's observed power state.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	PowerState banlieuev1.PowerState `json:"powerState,omitempty"`

	// hardware is the VM's CPUs, memory and disk sizes as the backend last reported
	// them.
	// +optional
	Hardware *banlieuev1.ObservedHardware `json:"hardware,omitempty"`

	// task is the backend task in flight, if any.
	// +optional
	Task TaskReference `json:"task,omitempty,omitzero"`

	// failureReason is set, with failureMessage, while the provider has given up on the
	// machine until its spec changes: a failure that retrying cannot fix (a template
	// that does not exist, a disk asked to shrink). It is the Ready condition's reason
	// then, and core reports the VM as Failed. Transient failures never set it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureReason string `json:"failureReason,omitempty"`

	// failureMessage says, for a person, why the provider gave up and what to change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=10240
	FailureMessage string `json:"failureMessage,omitempty"`

	// observedGeneration is the generation the provider last reconciled.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// restart is the restart request the provider took up last (spec.restartRequestedAt).
	// +optional
	Restart MachineRestart `json:"restart,omitempty,omitzero"`
}
