package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProxmoxMachineSpec is the desired state of a ProxmoxMachine: the machine contract plus Proxmox VE options.
// Its failure domain is a node name, patterned as Proxmox VE patterns one, so a path
// separator never reaches the Proxmox VE API through it.
//
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="!has(self.failureDomain) || self.failureDomain.matches('^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$')",message="failureDomain of a Proxmox VE machine is a node name: letters, digits and '-', starting and ending with a letter or digit",fieldPath=".failureDomain"
type ProxmoxMachineSpec struct {
	MachineSpec `json:",inline"`

	// proxmox holds Proxmox VE-specific options, the escape hatch for what the contract does not cover.
	// +optional
	Proxmox *ProxmoxOptions `json:"proxmox,omitempty"`
}

// ProxmoxMachineStatus is the observed state of a ProxmoxMachine.
type ProxmoxMachineStatus struct {
	MachineStatus `json:",inline"`

	// proxmox holds the Proxmox VE references of the VM.
	// +optional
	Proxmox *ProxmoxStatus `json:"proxmox,omitempty"`
}

// ProxmoxMachine is a VM on a Proxmox VE Provider, created by the core controller for a VirtualMachine
// and fulfilled by the proxmox provider controller. Its providerID looks like proxmox://<cluster>/<vmid>.
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
type ProxmoxMachine struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine's desired state.
	// +required
	Spec ProxmoxMachineSpec `json:"spec,omitempty,omitzero"`

	// status is the machine's observed state.
	// +optional
	Status ProxmoxMachineStatus `json:"status,omitempty,omitzero"`
}

// ProxmoxMachineList is a list of ProxmoxMachine objects.
//
// +kubebuilder:object:root=true
type ProxmoxMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxmoxMachine `json:"items"`
}

// ProxmoxMachineTemplateResource is the machine a ProxmoxMachineTemplate stamps out.
type ProxmoxMachineTemplateResource struct {
	// metadata holds labels and annotations for the machines made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec is the spec of the machines made from the template.
	// +required
	Spec ProxmoxMachineSpec `json:"spec,omitempty,omitzero"`
}

// ProxmoxMachineTemplateSpec is the spec of a ProxmoxMachineTemplate.
type ProxmoxMachineTemplateSpec struct {
	// template is the machine to stamp out.
	// +required
	Template ProxmoxMachineTemplateResource `json:"template,omitempty,omitzero"`
}

// ProxmoxMachineTemplate is a template of ProxmoxMachine objects, for Cluster API MachineSets and
// MachineDeployments that use banlieue's providers.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories={banlieue,banlieue-machines}
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
type ProxmoxMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the template.
	// +required
	Spec ProxmoxMachineTemplateSpec `json:"spec,omitempty,omitzero"`
}

// ProxmoxMachineTemplateList is a list of ProxmoxMachineTemplate objects.
//
// +kubebuilder:object:root=true
type ProxmoxMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxmoxMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &ProxmoxMachine{}, &ProxmoxMachineList{}, &ProxmoxMachineTemplate{}, &ProxmoxMachineTemplateList{})
}
