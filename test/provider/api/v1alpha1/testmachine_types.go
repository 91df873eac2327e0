package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
)

// GroupVersion is the test provider's group and version.
var GroupVersion = schema.GroupVersion{Group: "infrastructure.test.banlieue.io", Version: "v1alpha1"}

// AddToScheme adds TestMachine to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TestMachine{}, &TestMachineList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// HoldDeletionAnnotation is an annotation that, while present on a TestMachine, keeps the test provider from
// releasing it, as a slow backend would.
const HoldDeletionAnnotation = "test.banlieue.io/hold-deletion"

// HoldReadyParameter is a Provider parameter that, set to "true", keeps the test provider
// from reporting that Provider's machines provisioned, as a slow clone would.
const HoldReadyParameter = "holdReady"

// ReleaseParameter is a Provider parameter that, set to "true", makes the test
// provider's sessions Releasers: a machine deleted under deletionPolicy Retain then
// leaves its VM on the backend, released. Without it the test provider cannot release
// a VM, as a third-party provider without a Releaser.
const ReleaseParameter = "release"

// TestMachineSpec is the machine contract's spec.
type TestMachineSpec struct {
	infrav1.MachineSpec `json:",inline"`
}

// TestMachineStatus is the machine contract's status.
type TestMachineStatus struct {
	infrav1.MachineStatus `json:",inline"`
}

// TestMachine is an infrastructure machine of the test-only provider.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels={"banlieue.io/machine-contract=v1alpha1","cluster.x-k8s.io/v1beta2=v1alpha1"}
type TestMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine's desired state.
	Spec TestMachineSpec `json:"spec"`

	// status is the machine's observed state.
	// +optional
	Status TestMachineStatus `json:"status,omitempty,omitzero"`
}

// TestMachineList is a list of TestMachines.
//
// +kubebuilder:object:root=true
type TestMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TestMachine `json:"items"`
}
