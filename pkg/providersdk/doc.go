// Package providersdk is the toolkit a banlieue provider is written with. A backend
// implements a Driver, which connects to one Provider's backend and returns a Client
// that observes, creates, updates and deletes backend VMs; the generic Reconciler
// does everything else the machine contract asks of a provider: it owns the finalizer,
// honours pause, resolves the Provider and its credentials Secret, caches one backend
// session per Provider, tracks in-flight tasks, backs off, and writes spec.providerID
// and the contract's status.
//
// The package imports no backend library; it reads infrastructure machines as
// unstructured objects through pkg/contract, so one Reconciler serves any machine kind.
// A provider grants its controller RBAC for its machine kind (get, list, watch, patch,
// and patch on the status subresource), for Providers (get, list, watch) and for Secrets
// (get) in the Providers' namespaces.
package providersdk
