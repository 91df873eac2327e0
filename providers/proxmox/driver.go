package proxmox

import (
	"context"
	"net/http"
	"sync"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ProviderClass is the provider class this driver serves.
const ProviderClass = "proxmox"

// Defaults of the Driver's options.
const (
	// DefaultShutdownTimeout is how long a guest has to shut down before PVE stops it.
	DefaultShutdownTimeout = 2 * time.Minute
	// DefaultResponseTimeout bounds the wait for PVE's answer to one call, so a node that
	// accepts connections but hangs is reported unreachable rather than blocking.
	DefaultResponseTimeout = 2 * time.Minute
)

// SnippetWriter puts a cloud-init snippet into the snippets directory of a node's
// storage. By default user data reaches the guest as a NoCloud seed ISO uploaded
// through PVE's API; a driver with a SnippetWriter writes it as a cicustom snippet
// instead, which PVE's API cannot upload (its upload takes iso, vztmpl and import
// only): through a storage shared with the provider (DirSnippetWriter), scp, or a test
// simulator.
type SnippetWriter interface {
	// WriteSnippet writes data as snippets/<name> on storage, as node sees it.
	WriteSnippet(ctx context.Context, node, storage, name string, data []byte) error
}

// SnippetWriterFunc adapts a function to a SnippetWriter.
type SnippetWriterFunc func(ctx context.Context, node, storage, name string, data []byte) error

// WriteSnippet calls f.
func (f SnippetWriterFunc) WriteSnippet(ctx context.Context, node, storage, name string, data []byte) error {
	return f(ctx, node, storage, name, data)
}

// Driver connects to Proxmox VE clusters. It implements providersdk.Driver.
type Driver struct {
	shutdownTimeout time.Duration
	responseTimeout time.Duration
	snippets        SnippetWriter
	cloneAttempts   int
	// now is the clock that times failed imports and how long the session remembers
	// the clones it started; tests move it.
	now func() time.Time
	// wrapTransport, when set, wraps the HTTP transport of every session; tests hold
	// calls back with it.
	wrapTransport func(http.RoundTripper) http.RoundTripper

	// vmidsMu guards vmids: per cluster, the pool its sessions take the VMIDs of new
	// VMs from.
	vmidsMu sync.Mutex
	vmids   map[string]*vmidPool

	// asked remembers the machines a session of this driver asked PVE for a clone for,
	// by UID (see cloneAsked).
	asked memory[k8stypes.UID, struct{}]
}

var _ providersdk.Driver = (*Driver)(nil)

// Option configures a Driver.
type Option func(*Driver)

// WithShutdownTimeout sets how long a guest has to shut down on its own before PVE
// stops the VM.
func WithShutdownTimeout(d time.Duration) Option {
	return func(dr *Driver) { dr.shutdownTimeout = d }
}

// WithResponseTimeout sets how long one call waits for PVE's answer.
func WithResponseTimeout(d time.Duration) Option {
	return func(dr *Driver) { dr.responseTimeout = d }
}

// WithSnippetWriter makes user data a cicustom snippet that w writes to the nodes'
// snippets storage. Without one, user data is a NoCloud seed ISO uploaded through PVE's
// API.
func WithSnippetWriter(w SnippetWriter) Option { return func(dr *Driver) { dr.snippets = w } }

// NewDriver returns a Driver configured by opts.
func NewDriver(opts ...Option) *Driver {
	d := &Driver{
		shutdownTimeout: DefaultShutdownTimeout,
		responseTimeout: DefaultResponseTimeout,
		cloneAttempts:   10,
		now:             time.Now,
		vmids:           map[string]*vmidPool{},
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// vmidPool is the VMID pool of the cluster named key.
func (d *Driver) vmidPool(key string) *vmidPool {
	d.vmidsMu.Lock()
	defer d.vmidsMu.Unlock()
	p, ok := d.vmids[key]
	if !ok {
		p = newVMIDPool()
		d.vmids[key] = p
	}
	return p
}

// MachineKind is the infrastructure machine kind of this provider.
var MachineKind = infrav1.GroupVersion.WithKind("ProxmoxMachine")

// Config describes the Proxmox provider to providersdk.Setup, with a Driver made from opts.
func Config(opts ...Option) providersdk.Config {
	return providersdk.Config{Class: ProviderClass, MachineKind: MachineKind, Driver: NewDriver(opts...), StatusBlock: "proxmox"}
}
