// Package providersdk is the toolkit a banlieue provider is written with. A backend
// implements a Driver, which connects to one Provider's backend and returns a Client
// that observes, creates, updates and deletes backend VMs; the generic Reconciler
// does everything else the machine contract asks of a provider: it owns the finalizer,
// honours pause, resolves the Provider and its credentials Secret, caches one backend
// session per Provider, tracks in-flight tasks, backs off, and writes spec.providerID
// and the contract's status.
//
// # Steps and tasks
//
// A Create or Update that returns a Task is asynchronous: the task is recorded in
// status.task and polled through Observe. One that returns no Task is a synchronous
// step: the Reconciler observes the VM again and, while it exists, is not up to date and
// runs no task, calls Update again in the same reconcile, up to four steps per
// reconcile. A driver whose update is several synchronous calls (a config change, a
// resize, then a power-on task) so costs one reconcile and one status write, not one
// per step.
//
// # Guest addresses
//
// A running VM whose guest has reported no address yet (Observation.WaitingForGuest) is
// looked at again, each look a backend round trip. By default that goes on from 2 s
// doubling to 2 min for 16 looks, about 25 minutes (WithGuestBackoff). A Client that
// also implements GuestAddressReporter tells in one call for the whole Provider which
// VMs' guests report an address; for it the Reconciler looks only for a short window
// after the VM starts (2 s doubling to 30 s, 5 looks: WithGuestWindow), and the Provider
// controller, on its periodic inventory refresh (Config.InventoryInterval), makes that
// one call when some Ready, powered-on machine of the Provider has a providerID but no
// address, and wakes exactly the machines whose VM now reports one. Machines are read
// from the manager's cache; Setup wires the wakeups (WithMachineWakeups, WithWakeups)
// through a source.Channel. Idle VMs then cost the backend nothing per VM: one call per
// Provider per refresh while some guest has no address, none once all have one.
//
// # Provider conditions
//
// The Provider controller checks a healthy Provider's backend every
// Config.InventoryInterval. A machine that meets an unreachable backend or rejected
// credentials while its Provider's BackendReachable or CredentialsValid condition still
// says True wakes the Provider controller (WithProviderWakeups, WithProviderChecks,
// wired by Setup), whose check reads the credentials Secret again, connects and sets
// the conditions from what it meets. Once they say False, machines wake it no more, and
// they wake one Provider at most every 10 s: a thousand machines meeting one outage
// cost one check. The other way, a Provider update wakes its machines only when it
// changed what they act on: its spec, deletion or annotations, or the status of its
// Ready, BackendReachable or CredentialsValid condition, so that machines backing off
// retry as soon as the backend is back, while a check that rewrites only failure
// domains or messages costs no machine a backend look.
//
// The package imports no backend library; it reads infrastructure machines as
// unstructured objects through pkg/contract, so one Reconciler serves any machine kind.
// A provider grants its controller RBAC for its machine kind (get, list, watch, patch,
// and patch on the status subresource), for Providers (get, list, watch) and for Secrets
// (get) in the Providers' namespaces.
package providersdk
