package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VSphereMachineSpec is the desired state of a VSphereMachine: the machine contract plus vSphere options.
//
// +kubebuilder:validation:MinProperties=1
type VSphereMachineSpec struct {
	MachineSpec `json:",inline"`

	// vsphere holds vSphere-specific options, the escape hatch for what the contract does not cover.
	// +optional
	VSphere *VSphereOptions `json:"vsphere,omitempty"`
}

// VSphereMachineStatus is the observed state of a VSphereMachine.
type VSphereMachineStatus struct {
	MachineStatus `json:",inline"`

	// vsphere holds the vSphere references of the VM.
	// +optional
	VSphere *VSphereStatus `json:"vsphere,omitempty"`
}

// VSphereMachine is a VM on a vSphere Provider, created by the core controller for a VirtualMachine
// and fulfilled by the vsphere provider controller. Its providerID looks like vsphere://<BIOS UUID>.
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
type VSphereMachine struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine's desired state.
	// +required
	Spec VSphereMachineSpec `json:"spec,omitempty,omitzero"`

	// status is the machine's observed state.
	// +optional
	Status VSphereMachineStatus `json:"status,omitempty,omitzero"`
}

// VSphereMachineList is a list of VSphereMachine objects.
//
// +kubebuilder:object:root=true
type VSphereMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VSphereMachine `json:"items"`
}

// VSphereMachineTemplateResource is the machine a VSphereMachineTemplate stamps out.
type VSphereMachineTemplateResource struct {
	// metadata holds labels and annotations for the machines made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec is the spec of the machines made from the template.
	// +required
	Spec VSphereMachineSpec `json:"spec,omitempty,omitzero"`
}

// VSphereMachineTemplateSpec is the spec of a VSphereMachineTemplate.
type VSphereMachineTemplateSpec struct {
	// template is the machine to stamp out.
	// +required
	Template VSphereMachineTemplateResource `json:"template,omitempty,omitzero"`
}

// VSphereMachineTemplate is a template of VSphereMachine objects, for Cluster API MachineSets and
// MachineDeployments that use banlieue's providers.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories={banlieue,banlieue-machines}
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
type VSphereMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec VSphereMachineTemplateSpec `json:"spec,omitempty,omitzero"`
}

// VSphereMachineTemplateList is a list of VSphereMachineTemplate objects.
//
// +kubebuilder:object:root=true
type VSphereMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VSphereMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &VSphereMachine{}, &VSphereMachineList{}, &VSphereMachineTemplate{}, &VSphereMachineTemplateList{})
}
