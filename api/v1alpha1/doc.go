// Package v1alpha1 holds the user-facing banlieue.io/v1alpha1 API: VirtualMachine,
// Provider, VMClass and VMImage. It imports only Kubernetes API machinery so that a
// third party can use these types without banlieue's dependency tree.
//
// +kubebuilder:object:generate=true
// +groupName=banlieue.io
package v1alpha1
