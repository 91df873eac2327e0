package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VMClassSpec is the hardware and network shape of a VM, independent of any backend.
type VMClassSpec struct {
	// hardware is the VM's CPUs, memory and disks.
	// +required
	Hardware Hardware `json:"hardware,omitempty,omitzero"`

	// network is the VM's network interfaces; leave it out rather than empty.
	// +optional
	Network Network `json:"network,omitempty,omitzero"`

	// firmware is the boot firmware: bios (the default), efi or efi-secure.
	// +optional
	// +default="bios"
	Firmware Firmware `json:"firmware,omitempty"`

	// features are backend features the VM needs, e.g. nestedVirtualization; a Provider
	// is only chosen if it declares every one of them in capabilities.features.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Features []string `json:"features,omitempty"`
}

// Hardware is the compute and storage part of a VMClass.
type Hardware struct {
	// cpus is the number of virtual CPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=768
	CPUs int32 `json:"cpus,omitempty"`

	// memoryMiB is the memory size in MiB, at least 128 and at most 24 TiB.
	// +required
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=25165824
	MemoryMiB int64 `json:"memoryMiB,omitempty"`

	// disks are the VM's disks; the first one is the boot disk, made from the image and
	// grown to its size.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.filter(e, e.name == d.name).size() == 1)",message="disk names must be unique"
	// +listType=atomic
	Disks []Disk `json:"disks,omitempty"`
}

// Disk is one disk of a VMClass.
type Disk struct {
	// name identifies the disk within the class, e.g. root or data.
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

	// storageClass names one of the Provider's capabilities.storageClasses.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	StorageClass string `json:"storageClass,omitempty"`

	// provisioning is how space is allocated: thin (the default), thick or eagerZeroed.
	// +optional
	// +default="thin"
	Provisioning DiskProvisioning `json:"provisioning,omitempty"`
}

// Network is the network part of a VMClass.
//
// +kubebuilder:validation:MinProperties=1
type Network struct {
	// interfaces are the VM's network interfaces, in order.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:rule="self.all(i, self.filter(j, j.name == i.name).size() == 1)",message="interface names must be unique"
	// +listType=atomic
	Interfaces []Interface `json:"interfaces,omitempty"`
}

// Interface is one network interface of a VMClass.
type Interface struct {
	// name identifies the interface within the class, e.g. eth0.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// networkClass names one of the Provider's capabilities.networkClasses.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	NetworkClass string `json:"networkClass,omitempty"`

	// ipam says how the interface gets its address; DHCP by default.
	// +optional
	IPAM *IPAM `json:"ipam,omitempty"`

	// mtu is the interface's MTU, from 576 to 9216; the network's default when unset.
	// +optional
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu,omitempty"`
}

// VMClass is a named hardware and network shape that VirtualMachines refer to.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vmc,categories=banlieue
// +kubebuilder:printcolumn:name="CPUs",type=integer,JSONPath=`.spec.hardware.cpus`
// +kubebuilder:printcolumn:name="Memory MiB",type=integer,JSONPath=`.spec.hardware.memoryMiB`
// +kubebuilder:printcolumn:name="Firmware",type=string,JSONPath=`.spec.firmware`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VMClass struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the class's hardware and network shape.
	// +required
	Spec VMClassSpec `json:"spec,omitempty,omitzero"`
}

// VMClassList is a list of VMClasses.
//
// +kubebuilder:object:root=true
type VMClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VMClass `json:"items"`
}

func init() { objectTypes = append(objectTypes, &VMClass{}, &VMClassList{}) }
