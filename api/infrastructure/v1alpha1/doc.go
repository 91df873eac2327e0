// Package v1alpha1 holds the infrastructure.banlieue.io/v1alpha1 API: the infrastructure
// machines (VSphereMachine, LibvirtMachine, ProxmoxMachine) that the core controller
// creates and the provider controllers fulfil, and their templates. All kinds share the
// machine contract's spec and status (MachineSpec, MachineStatus); each adds an optional
// backend-specific block, the explicit escape hatch.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.banlieue.io
package v1alpha1
