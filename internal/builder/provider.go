package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Provider returns the Provider namespace/name of the provider class class, with no
// connection, capabilities or parameters until opts set them.
func Provider(namespace, name, class string, opts ...func(*banlieuev1.Provider)) *banlieuev1.Provider {
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       banlieuev1.ProviderSpec{ProviderClassRef: banlieuev1.LocalObjectReference{Name: class}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// WithLabels sets a Provider's labels, which VMs' providerSelectors match.
func WithLabels(labels map[string]string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) { p.Labels = labels }
}

// WithConnection sets how a Provider's controller reaches its backend.
func WithConnection(c banlieuev1.Connection) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) { p.Spec.Connection = c }
}

// WithStorageClass makes a Provider offer the storage class name on the backend's
// storage target, e.g. {datastore: ds-1}.
func WithStorageClass(name string, target map[string]string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) {
		p.Spec.Capabilities.StorageClasses = append(p.Spec.Capabilities.StorageClasses, banlieuev1.ClassMapping{Name: name, Target: target})
	}
}

// WithNetworkClass makes a Provider offer the network class name on the backend's
// network target, e.g. {network: VM Network}.
func WithNetworkClass(name string, target map[string]string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) {
		p.Spec.Capabilities.NetworkClasses = append(p.Spec.Capabilities.NetworkClasses, banlieuev1.ClassMapping{Name: name, Target: target})
	}
}

// WithTestClasses makes a Provider offer the classes the test suites' VMClasses ask for
// on its backend: storage class fast on {storageKey: storage}, then network classes prod
// on {networkKey: prod} and backend on {networkKey: backend}.
func WithTestClasses(storageKey, storage, networkKey, prod, backend string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) {
		WithStorageClass("fast", map[string]string{storageKey: storage})(p)
		WithNetworkClass("prod", map[string]string{networkKey: prod})(p)
		WithNetworkClass("backend", map[string]string{networkKey: backend})(p)
	}
}

// WithFeatures sets the features a Provider's backend offers.
func WithFeatures(features ...string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) { p.Spec.Capabilities.Features = features }
}

// WithParameters sets a Provider's backend defaults, e.g. {datacenter: DC0}.
func WithParameters(parameters map[string]string) func(*banlieuev1.Provider) {
	return func(p *banlieuev1.Provider) { p.Spec.Parameters = parameters }
}

// FailureDomain returns a failure domain named name with labels given as key, value
// pairs (an odd last key is left out); its labels are an empty map when there are none.
func FailureDomain(name string, labelKV ...string) banlieuev1.FailureDomain {
	d := banlieuev1.FailureDomain{Name: name, Labels: map[string]string{}}
	for i := 0; i+1 < len(labelKV); i += 2 {
		d.Labels[labelKV[i]] = labelKV[i+1]
	}
	return d
}
