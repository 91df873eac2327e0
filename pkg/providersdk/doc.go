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
// after the VM starts (2 s doubling to 30 s, 5 looks: WithGuestWindow), each look that
// one call, its answer shared by the Provider's machines for the window's first
// interval, and an Observe only for a VM it lists; and the Provider
// controller, on its periodic inventory refresh (Config.InventoryInterval), makes that
// one call when some Ready, powered-on machine of the Provider has a providerID but no
// address, and wakes exactly the machines whose VM now reports one. Machines are read
// from the manager's cache; Setup wires the wakeups (WithMachineWakeups, WithWakeups)
// through a source.Channel. Idle VMs then cost the backend nothing per VM: one call per
// Provider per refresh while some guest has no address, none once all have one.
//
// # Deletion policy
//
// A machine deleted with spec.deletionPolicy Retain keeps its VM. For it the Reconciler
// calls the Client's optional Releaser instead of Delete, which removes the machine's
// identity marks from the VM and nothing else, and removes the finalizer once Observe
// no longer finds the VM as the machine's: Machine.Releasing tells Observe to report a
// VM without the machine's marks as not there, so that a provider that restarted after
// the marks were removed lets the machine go too. A Client that is no Releaser keeps
// the machine, and its VM, with Ready=False, reason RetainNotSupported, until its
// deletionPolicy is Delete: a VM is never destroyed against that policy.
//
// # Orphan report
//
// A Client that is an OrphanLister lists the backend's VMs that carry a machine's
// identity mark. The Provider controller calls it on its refresh at most every
// Config.OrphanScanInterval (10 min), counts as orphans the marked VMs whose machine UID
// no machine of the kind has in any namespace (read from the cache, a machine being
// deleted included, and confirmed by a live GET of the machine the mark names, when it
// names one), and writes Provider.status.orphans and the gauge ProviderOrphanedVMs. It
// only reports; nothing deletes an orphan. The report has no timestamp, so an unchanged
// one writes nothing.
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
// # Cluster API
//
// A machine is managed by Cluster API when it has an ownerReference to a Machine of
// the group cluster.x-k8s.io (any version) or the label cluster.x-k8s.io/cluster-name.
// Cluster API's Machines and Clusters are read as unstructured cluster.x-k8s.io/v1beta2
// objects, never through Cluster API's Go types; a machine that has neither the owner
// nor the label (core's, or one written by hand) costs no such read and behaves as if
// Cluster API did not exist. For a managed machine the Reconciler:
//
//   - pauses it, as the machine's own cluster.x-k8s.io/paused annotation does, while
//     its Cluster has spec.paused true or the cluster.x-k8s.io/paused annotation: the
//     Paused condition is True and names the Cluster, and nothing is done, deletion
//     included, until the Cluster is unpaused;
//   - before it makes a VM, waits (Ready False) for a Machine owner
//     (WaitingForMachineOwner), for the Cluster to exist with
//     status.initialization.infrastructureProvisioned true
//     (WaitingForClusterInfrastructure) and for the Machine's
//     spec.bootstrap.dataSecretName (WaitingForBootstrapData). A machine whose VM
//     exists or is being made (spec.providerID, a task in status.task) does not wait,
//     and deleting never does;
//   - hands the driver, as Machine.UserData, the "value" key of the Secret the
//     Machine's spec.bootstrap.dataSecretName names: that takes precedence over the
//     machine's own spec.userData, which Machine.Spec.UserData then no longer shows
//     (it names the bootstrap Secret and its key instead). The Secret must still be of
//     type cluster.x-k8s.io/secret (or banlieue.io/user-data);
//   - when the machine's spec.failureDomain is empty, takes the Machine's
//     spec.failureDomain, for admission and the driver (Machine.Spec.FailureDomain);
//     the machine object is not rewritten. When both are set the machine's own wins.
//     status.failureDomain is always what the driver observed of the placement made.
//
// When the Cluster API CRDs are installed as the provider starts, Machines (through
// their spec.infrastructureRef) and Clusters (through the machines' cluster-name label)
// are watched and wake the machines they concern; otherwise a waiting machine looks
// again every 30 s. Config.Namespace and Config.WatchFilter are Cluster API's
// --namespace and --watch-filter: only the machines of that namespace, carrying the
// label cluster.x-k8s.io/watch-filter with that value, are reconciled, and only Cluster
// API objects with the label wake them. Providers, their credentials Secrets and the
// machines' cache stay cluster-wide (Config.CacheOptions).
//
// The package imports no backend library; it reads infrastructure machines as
// unstructured objects through pkg/contract, so one Reconciler serves any machine kind.
// A provider grants its controller RBAC for its machine kind (get, list, watch, patch,
// and patch on the status subresource), for Providers (get, list, watch), for Secrets
// (get) in the Providers' namespaces and, for Cluster API, get, list and watch on
// cluster.x-k8s.io machines and clusters.
package providersdk
