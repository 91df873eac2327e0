package contract

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
)

// Machine is an infrastructure machine of any kind as the contract sees it: its
// metadata, and the contract's part of its spec and status. Decoding a machine into it
// drops what a backend adds (status.vsphere, say), so a cache of Machines holds a
// third of the memory the same machines take as unstructured objects. A Machine's
// kind is the one in its TypeMeta; see NewScheme.
//
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   infrav1.MachineSpec   `json:"spec,omitempty,omitzero"`
	Status infrav1.MachineStatus `json:"status,omitempty,omitzero"`
}

// MachineList is a list of Machines.
//
// +kubebuilder:object:generate=true
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

// NewScheme returns a scheme that decodes machines of kind gvk (and their lists) as
// Machine. It knows that one kind only: a scheme cannot change once in use, and a
// kind's Go type must be its own within a scheme, so a reader of several machine kinds
// keeps one scheme, and one cache and client with it, per kind.
func NewScheme(gvk schema.GroupVersionKind) *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(gvk, &Machine{})
	s.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &MachineList{})
	metav1.AddToGroupVersion(s, gvk.GroupVersion())
	return s
}
