package providersdk

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// The optional interfaces of a Client. The SDK discovers them by type assertion on the
// session Connect returns, as crossplane-runtime does; a backend implements those it
// can answer and leaves the rest to the SDK's defaults.

// InventoryReader is an optional interface of a Client: a backend that reports its
// failure domains. The Provider controller calls it on connect and then on a modest
// interval (Config.InventoryInterval). Without it a Provider whose session connects is
// Ready with no failure domains, which placement takes as one unnamed domain.
type InventoryReader interface {
	// Inventory reports what the backend offers: its failure domains, each with the
	// Provider's storage and network classes whose targets exist there.
	Inventory(ctx context.Context) (Inventory, error)
}

// Inventory is what a backend offers to VMs.
type Inventory struct {
	// FailureDomains are the backend's failure domains, written to the Provider's status.
	FailureDomains []banlieuev1.FailureDomain
}

// InventoryFunc adapts a function to an InventoryReader.
type InventoryFunc func(ctx context.Context) (Inventory, error)

// Inventory calls f.
func (f InventoryFunc) Inventory(ctx context.Context) (Inventory, error) { return f(ctx) }

// NopInventoryReader is an InventoryReader that reports no failure domains.
type NopInventoryReader struct{}

// Inventory reports no failure domains.
func (NopInventoryReader) Inventory(context.Context) (Inventory, error) { return Inventory{}, nil }

// ImageResolver is an optional interface of a Client: a backend that finds, or imports,
// a VMImage's source itself. Without it every image is ready on the Provider as its
// source names it (ResolvedRef is the source's ref), which suits a backend that takes
// image references as they are.
type ImageResolver interface {
	// ResolveImage finds, or imports, an image source on the backend. An import is
	// started in the background and reported, with its progress, on later calls.
	ResolveImage(ctx context.Context, img *Image) (ImageResult, error)
}

// Image is one VMImage's source for the Provider's class.
type Image struct {
	// Name is the VMImage's name.
	Name string
	// UID is the VMImage's UID.
	UID types.UID
	// Source is the image's source for the Provider's class.
	Source banlieuev1.ImageSource
}

// ImageResult is an image's state on one Provider; it becomes that Provider's row in
// the VMImage's status.perProvider.
type ImageResult struct {
	// Ready is true when VMs can be made from the image.
	Ready bool
	// ResolvedRef is the backend's own reference to the image, copied to machines.
	ResolvedRef string
	// Reason is a CamelCase word saying why the image is not ready.
	Reason string
	// Message says, for a person, why the image is not ready or how an import goes.
	Message string
	// InProgress is true while an import runs; the image is looked at again soon.
	InProgress bool
}

// ImageResolverFunc adapts a function to an ImageResolver.
type ImageResolverFunc func(ctx context.Context, img *Image) (ImageResult, error)

// ResolveImage calls f.
func (f ImageResolverFunc) ResolveImage(ctx context.Context, img *Image) (ImageResult, error) {
	return f(ctx, img)
}

// NopImageResolver is an ImageResolver that reports every image ready, resolved to its
// source's ref: the SDK's behaviour for a Client that is no ImageResolver.
type NopImageResolver struct{}

// ResolveImage reports the image ready, resolved to its source's ref.
func (NopImageResolver) ResolveImage(_ context.Context, img *Image) (ImageResult, error) {
	return ImageResult{Ready: true, ResolvedRef: img.Source.Ref}, nil
}

// GuestAddressReporter is an optional interface of a Client: a backend that can tell, in
// one bounded call for the whole Provider, which of its VMs' guests report an address.
//
// Without it, the Reconciler looks at each running VM whose guest has reported no
// address yet again and again, one backend round trip per VM per look, for about 25
// minutes (WithGuestBackoff): a guest with no operating system or no agent never reports
// one. With it, the Reconciler looks at such a VM only for a short window after it
// starts (WithGuestWindow) and then stops; the Provider controller, on its periodic
// inventory refresh, makes this one call when some Ready machine of the Provider has a
// providerID but no address, and wakes exactly the machines whose VM now reports one. A
// Provider of idle VMs then costs one call per refresh, whatever the number of VMs, and
// none when every running machine has its address.
type GuestAddressReporter interface {
	// GuestsWithAddresses returns the providerIDs (as Observation.ProviderID reports
	// them) of the Provider's VMs whose guests report at least one address that Observe
	// would put in Observation.Addresses. VMs of other Providers may be included; they
	// are ignored. It never changes the backend, and makes a bounded number of backend
	// calls whatever the number of VMs.
	GuestsWithAddresses(ctx context.Context) (map[string]bool, error)
}

// GuestAddressReporterFunc adapts a function to a GuestAddressReporter.
type GuestAddressReporterFunc func(ctx context.Context) (map[string]bool, error)

// GuestsWithAddresses calls f.
func (f GuestAddressReporterFunc) GuestsWithAddresses(ctx context.Context) (map[string]bool, error) {
	return f(ctx)
}

// NopGuestAddressReporter is a GuestAddressReporter whose VMs never report an address.
type NopGuestAddressReporter struct{}

// GuestsWithAddresses reports no VM.
func (NopGuestAddressReporter) GuestsWithAddresses(context.Context) (map[string]bool, error) {
	return map[string]bool{}, nil
}

// Releaser is an optional interface of a Client: a backend that can let a VM go. For a
// machine deleted under spec.deletionPolicy Retain the Reconciler calls Release instead
// of Delete, and removes the machine's finalizer once Observe no longer finds the VM
// (Machine.Releasing tells Observe to report a VM without the machine's marks as not
// there). Without it, a Retain machine is kept with Ready=False, reason
// RetainNotSupported, and its VM is never deleted, until its deletionPolicy is Delete.
type Releaser interface {
	// Release removes the machine's identity marks from its VM, which Observe found
	// (obs.Exists is true), and nothing else: power, disks, volumes and seed images stay
	// as they are. It is idempotent, and succeeds when the VM carries no mark any more.
	// A long backend operation is returned as a Task and polled through Observe.
	Release(ctx context.Context, m *Machine, obs Observation) (ReleaseResult, error)
}

// ReleaseResult is what Release started.
type ReleaseResult struct {
	// Task is the backend task removing the marks, if it is asynchronous.
	Task Task
}

// ReleaserFunc adapts a function to a Releaser.
type ReleaserFunc func(ctx context.Context, m *Machine, obs Observation) (ReleaseResult, error)

// Release calls f.
func (f ReleaserFunc) Release(ctx context.Context, m *Machine, obs Observation) (ReleaseResult, error) {
	return f(ctx, m, obs)
}

// NopReleaser is a Releaser that removes nothing and succeeds.
type NopReleaser struct{}

// Release does nothing.
func (NopReleaser) Release(context.Context, *Machine, Observation) (ReleaseResult, error) {
	return ReleaseResult{}, nil
}

// Adopter is an optional interface of a Client: a backend that can take over a VM it
// did not make. For a machine with spec.adoptProviderID the Reconciler never calls
// Create. Observe reads the VM the ID names and reports it with Exists and Unclaimed
// while it carries no machine's identity mark; the Reconciler then calls Adopt, and
// reads the VM again. Without it, an adopting machine is kept with Ready=False, reason
// AdoptionTargetInvalid, and the Provider publishes no providerIDPrefix, so core places
// no adopting VM on it.
//
// Observe of an adopting machine reports, for the VM the ID names: one carrying the
// machine's mark as for any machine; one carrying no mark as Exists and Unclaimed, and
// as not there (Exists false) once the machine is deleted; one carrying another
// machine's mark as AlreadyManaged (an error), and as not there once the machine is
// deleted; no VM as not there, which the Reconciler reports as AdoptionTargetNotFound.
type Adopter interface {
	// ProviderIDPrefix is what the provider ID of every VM of the session's Provider
	// starts with (vsphere://, libvirt://<host>/, proxmox://<cluster>/): the Provider's
	// status.providerIDPrefix, by which core places an adopting VM.
	ProviderIDPrefix() string

	// Adopt writes the machine's identity marks on the VM Observe found (obs.Unclaimed),
	// and nothing else: no clone, no reboot, no change of the VM's hardware. Of two
	// machines adopting one VM at once exactly one may succeed: the other's Adopt, or its
	// next Observe, sees the winner's mark (AlreadyManaged). A long backend operation is
	// returned as a Task and polled through Observe.
	Adopt(ctx context.Context, m *Machine, obs Observation) (AdoptResult, error)
}

// AdoptResult is what Adopt started.
type AdoptResult struct {
	// Task is the backend task writing the marks, if it is asynchronous.
	Task Task
}

// VMLister is an optional interface of a Client: a backend that can list the VMs it has
// that no machine manages, for `banlieue adopt` to print VirtualMachines that adopt them.
// Without it, `banlieue adopt` says the Provider's class cannot list its VMs.
type VMLister interface {
	// ListVMs returns the backend's VMs within the Provider's scope that carry no machine
	// identity mark and are not templates. It never changes the backend. An
	// administrator's command calls it, once, never a controller: a read per VM for
	// what a listing does not give (every disk's size, the firmware) is acceptable, and
	// the shape must be exact, for the printed VMClass is what the VM is held to.
	ListVMs(ctx context.Context) ([]UnmanagedVM, error)
}

// UnmanagedVM is one backend VM that no machine manages.
type UnmanagedVM struct {
	// ProviderID is the VM's provider ID, as Observe would report it and as
	// spec.adoptProviderID takes it.
	ProviderID string
	// Name is the VM's name on the backend.
	Name string
	// Location is where the VM is, in the backend's words: its folder's inventory path
	// on vSphere, its node (and "/<pool>" when it is in one) on Proxmox VE, "" on
	// libvirt, whose Provider is one host.
	Location string
	// PowerState is the VM's power state.
	PowerState banlieuev1.PowerState
	// Hardware is the VM's shape: CPUs, memory and disk sizes in bus order.
	Hardware Hardware
	// Firmware is the VM's firmware, BIOS or UEFI; "" when the backend does not say.
	Firmware banlieuev1.Firmware
}

// AlreadyManaged is the error Observe returns for an adopting machine whose VM carries
// another machine's identity mark. It does not name the other machine, which may be
// another tenant's.
func AlreadyManaged(providerID string) error {
	return Retryable(infrav1.MachineAlreadyManagedReason,
		"the VM %s is managed by another machine already; it is left alone", providerID)
}

// AdoptionTargetInvalid is the error for an adoptProviderID that names what cannot be
// adopted, such as a template or an ID of another form; why says which.
func AdoptionTargetInvalid(providerID, why string) error {
	return Permanent(infrav1.MachineAdoptionTargetInvalidReason, "adoptProviderID %s cannot be adopted: %s", providerID, why)
}

// OrphanLister is an optional interface of a Client: a backend that can list, in a
// bounded number of calls, the VMs that carry a banlieue machine's identity mark. The
// Provider controller calls it at most every Config.OrphanScanInterval and reports, in
// the Provider's status.orphans and the banlieue_provider_orphaned_vms gauge, the marked
// VMs whose machine no longer exists. It only reports: nothing is deleted. Without it a
// Provider reports no orphans.
type OrphanLister interface {
	// ListMarked returns the backend's VMs that carry a machine identity mark, whatever
	// the machine's state. VMs of other Providers' classes are never marked as this
	// driver's; templates are left out. It never changes the backend.
	ListMarked(ctx context.Context) ([]MarkedVM, error)
}

// MarkedVM is one backend VM that carries a machine identity mark.
type MarkedVM struct {
	// ProviderID is the VM's provider ID, as Observation.ProviderID reports it.
	ProviderID string
	// Name is the VM's name on the backend.
	Name string
	// MachineUID is the UID of the machine the mark names.
	MachineUID types.UID
	// Machine is the namespace and name of the machine the mark names, when the mark
	// names them; zero otherwise.
	Machine types.NamespacedName
	// ClusterID is the cluster the mark names (Machine.ClusterID when the VM was
	// marked); "" for a mark that names none, which is reported but never deleted.
	ClusterID string
	// Adopted is true for a VM a machine adopted (spec.adoptProviderID) rather than
	// created: it was its owner's before banlieue's, and is reported but never deleted
	// as an orphan.
	Adopted bool
}

// OrphanListerFunc adapts a function to an OrphanLister.
type OrphanListerFunc func(ctx context.Context) ([]MarkedVM, error)

// ListMarked calls f.
func (f OrphanListerFunc) ListMarked(ctx context.Context) ([]MarkedVM, error) { return f(ctx) }

// NopOrphanLister is an OrphanLister whose backend has no marked VM.
type NopOrphanLister struct{}

// ListMarked reports no VM.
func (NopOrphanLister) ListMarked(context.Context) ([]MarkedVM, error) { return nil, nil }

// inventoryOf reads cl's inventory, or none when cl is no InventoryReader.
func inventoryOf(ctx context.Context, cl Client) (Inventory, error) {
	if r, ok := cl.(InventoryReader); ok {
		return r.Inventory(ctx)
	}
	return NopInventoryReader{}.Inventory(ctx)
}

// resolveImage resolves img through cl, or as its source names it when cl is no
// ImageResolver.
func resolveImage(ctx context.Context, cl Client, img *Image) (ImageResult, error) {
	if r, ok := cl.(ImageResolver); ok {
		return r.ResolveImage(ctx, img)
	}
	return NopImageResolver{}.ResolveImage(ctx, img)
}

// Admitter is an optional interface of a Driver whose machines' own block (the escape
// hatch, e.g. spec.vsphere) can place a VM itself: a folder, a pool, a node, a
// datastore. Admit refuses a block that asks for more than the Provider offers, from p
// and m alone, before any backend call; the Reconciler reports its error as Ready=False,
// reason NotPermitted, with the error's text as the message, which must name only the
// machine's own fields and Provider. ProviderOffers and WithinPath help write it.
type Admitter interface {
	// Admit returns nil when the machine's block asks only for what p offers.
	Admit(p *banlieuev1.Provider, m *Machine) error
}

// ProviderOffers reports whether value is one the Provider offers under key: the value
// of its parameter key, or of key in any of its storage or network class targets.
func ProviderOffers(p *banlieuev1.Provider, key, value string) bool {
	if p.Spec.Parameters[key] == value {
		return true
	}
	for _, classes := range [][]banlieuev1.ClassMapping{p.Spec.Capabilities.StorageClasses, p.Spec.Capabilities.NetworkClasses} {
		for _, c := range classes {
			if v, ok := c.Target[key]; ok && v == value {
				return true
			}
		}
	}
	return false
}

// WithinPath reports whether path is root or below it, segment by segment ("/a/b" is
// within "/a", "/ab" is not); every path is within an empty root.
func WithinPath(path, root string) bool {
	root = strings.TrimSuffix(root, "/")
	return root == "" || path == root || strings.HasPrefix(path, root+"/")
}
