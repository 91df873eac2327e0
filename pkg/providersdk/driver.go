package providersdk

import (
	"context"
	"crypto/x509"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Driver connects to a backend. It is the one thing a provider writes: its Connect
// returns a Client, which may also implement the optional interfaces InventoryReader,
// ImageResolver, GuestAddressReporter and Releaser.
type Driver interface {
	// Connect opens a session to the backend of info.Provider. The Reconciler caches
	// the Client and connects again when the Provider or its Secret changes. ctx bounds
	// the connection attempt only: the session must not keep it.
	Connect(ctx context.Context, info ProviderInfo) (Client, error)
}

// DriverFunc adapts a function to a Driver.
type DriverFunc func(ctx context.Context, info ProviderInfo) (Client, error)

// Connect calls f.
func (f DriverFunc) Connect(ctx context.Context, info ProviderInfo) (Client, error) {
	return f(ctx, info)
}

// NopDriver is a Driver whose every session is a NopClient.
type NopDriver struct{}

// Connect returns a NopClient.
func (NopDriver) Connect(context.Context, ProviderInfo) (Client, error) { return NopClient{}, nil }

// ProviderInfo is what a Driver connects with: the Provider and its credentials.
type ProviderInfo struct {
	// Provider is the Provider the machine runs on. Drivers must not modify it.
	Provider *banlieuev1.Provider

	// Credentials is the data of the Secret in spec.connection.credentialsRef, or nil
	// when the Provider has none. It must never be logged or put in an error.
	Credentials map[string][]byte

	// CABundle is the PEM bundle from spec.connection.caBundle, whichever way it is
	// given, or nil when the Provider has none.
	CABundle []byte
}

// SecretRef names the Provider's credentials Secret as "<namespace>/<name>", for
// messages; "<namespace>/<none>" when it has none.
func (i ProviderInfo) SecretRef() string {
	p := i.Provider
	if ref := p.Spec.Connection.CredentialsRef; ref.IsDefined() {
		return p.Namespace + "/" + ref.Name
	}
	return p.Namespace + "/<none>"
}

// RootCAs returns the pool of the Provider's CA bundle, or nil (the system roots) when
// it has none. A bundle without a certificate is a PermanentError.
func (i ProviderInfo) RootCAs() (*x509.CertPool, error) {
	if len(i.CABundle) == 0 {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(i.CABundle) {
		return nil, Permanent("", "spec.connection.caBundle holds no PEM certificate")
	}
	return pool, nil
}

// StorageClasses returns the Provider's storage classes with their backend targets, as
// spec.capabilities declares them.
func (i ProviderInfo) StorageClasses() []ClassTarget {
	out := make([]ClassTarget, 0, len(i.Provider.Spec.Capabilities.StorageClasses))
	for _, c := range i.Provider.Spec.Capabilities.StorageClasses {
		out = append(out, ClassTarget{Name: c.Name, Target: c.Target})
	}
	return out
}

// NetworkClasses returns the Provider's network classes with their backend targets, as
// spec.capabilities declares them.
func (i ProviderInfo) NetworkClasses() []ClassTarget {
	out := make([]ClassTarget, 0, len(i.Provider.Spec.Capabilities.NetworkClasses))
	for _, c := range i.Provider.Spec.Capabilities.NetworkClasses {
		out = append(out, ClassTarget{Name: c.Name, Target: c.Target})
	}
	return out
}

// ClassTarget is one of a Provider's storage or network classes and the backend objects
// its target map names.
type ClassTarget struct {
	// Name is the backend-neutral class name.
	Name string
	// Target is the class's backend objects, e.g. {"datastore": "ds1"}.
	Target map[string]string
}

// AvailableClasses returns the names of the classes whose target exists, as exists
// tells, in the order given: what a failure domain reports in
// availableStorageClasses or availableNetworkClasses.
func AvailableClasses(classes []ClassTarget, exists func(target map[string]string) bool) []string {
	out := []string{}
	for _, c := range classes {
		if exists(c.Target) {
			out = append(out, c.Name)
		}
	}
	return out
}
