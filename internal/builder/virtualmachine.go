package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// VirtualMachine returns the VirtualMachine namespace/name of the VMClass class and the
// VMImage image, placed on any Provider, changed by opts.
func VirtualMachine(namespace, name, class, image string, opts ...func(*banlieuev1.VirtualMachine)) *banlieuev1.VirtualMachine {
	vm := &banlieuev1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: banlieuev1.VirtualMachineSpec{
			ClassRef: banlieuev1.LocalObjectReference{Name: class},
			ImageRef: banlieuev1.LocalObjectReference{Name: image},
		},
	}
	for _, o := range opts {
		o(vm)
	}
	return vm
}

// WithProviderSelector places a VirtualMachine on the Providers that carry labels; with
// no labels it leaves the VirtualMachine's selector unset, so any Provider will do.
func WithProviderSelector(labels map[string]string) func(*banlieuev1.VirtualMachine) {
	return func(vm *banlieuev1.VirtualMachine) {
		if len(labels) > 0 {
			vm.Spec.Placement.ProviderSelector = &banlieuev1.LabelSelector{MatchLabels: labels}
		}
	}
}

// WithUserData makes a VirtualMachine read its user data from the Secret secret, under
// key ("" for the provider's default key).
func WithUserData(secret, key string) func(*banlieuev1.VirtualMachine) {
	return func(vm *banlieuev1.VirtualMachine) {
		vm.Spec.UserData = banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: secret}, Key: key}
	}
}

// WithClassUpdatePolicy sets whether a VirtualMachine takes the edits of its VMClass.
func WithClassUpdatePolicy(policy banlieuev1.ClassUpdatePolicy) func(*banlieuev1.VirtualMachine) {
	return func(vm *banlieuev1.VirtualMachine) { vm.Spec.ClassUpdatePolicy = policy }
}
