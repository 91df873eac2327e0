package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LibvirtMachineSpec is the desired state of a LibvirtMachine: the machine contract plus libvirt options.
//
// +kubebuilder:validation:MinProperties=1
type LibvirtMachineSpec struct {
	MachineSpec `json:",inline"`

	// libvirt holds libvirt-specific options, the escape hatch for what the contract does not cover.
	// +optional
	Libvirt *LibvirtOptions `json:"libvirt,omitempty"`
}

// LibvirtMachineStatus is the observed state of a LibvirtMachine.
type LibvirtMachineStatus struct {
	MachineStatus `json:",inline"`

	// libvirt holds the libvirt references of the VM.
	// +optional
	Libvirt *LibvirtStatus `json:"libvirt,omitempty"`
}

// LibvirtMachine is a VM on a libvirt Provider, created by the core controller for a VirtualMachine
// and fulfilled by the libvirt provider controller. Its providerID looks like libvirt://<host>/<domain UUID>.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={banlieue,banlieue-machines}
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LibvirtMachine struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine's desired state.
	// +required
	Spec LibvirtMachineSpec `json:"spec,omitempty,omitzero"`

	// status is the machine's observed state.
	// +optional
	Status LibvirtMachineStatus `json:"status,omitempty,omitzero"`
}

// LibvirtMachineList is a list of LibvirtMachine objects.
//
// +kubebuilder:object:root=true
type LibvirtMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtMachine `json:"items"`
}

// LibvirtMachineTemplateResource is the machine a LibvirtMachineTemplate stamps out.
type LibvirtMachineTemplateResource struct {
	// metadata holds labels and annotations for the machines made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec is the spec of the machines made from the template.
	// +required
	Spec LibvirtMachineSpec `json:"spec,omitempty,omitzero"`
}

// LibvirtMachineTemplateSpec is the spec of a LibvirtMachineTemplate.
type LibvirtMachineTemplateSpec struct {
	// template is the machine to stamp out.
	// +required
	Template LibvirtMachineTemplateResource `json:"template,omitempty,omitzero"`
}

// LibvirtMachineTemplate is a template of LibvirtMachine objects, for Cluster API MachineSets and
// MachineDeployments that use banlieue's providers.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories={banlieue,banlieue-machines}
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
type LibvirtMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec LibvirtMachineTemplateSpec `json:"spec,omitempty,omitzero"`
}

// LibvirtMachineTemplateList is a list of LibvirtMachineTemplate objects.
//
// +kubebuilder:object:root=true
type LibvirtMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &LibvirtMachine{}, &LibvirtMachineList{}, &LibvirtMachineTemplate{}, &LibvirtMachineTemplateList{})
}
