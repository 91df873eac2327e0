// Package v1alpha1 is the API of banlieue's test-only provider: TestMachine, an
// infrastructure machine that implements the machine contract with no backend behind it.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.test.banlieue.io
package v1alpha1
