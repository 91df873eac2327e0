package vsphere

import (
	"context"
	"time"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ProviderClass is the provider class this driver serves.
const ProviderClass = "vsphere"

// StatusBlock is the machine status block the driver's details are written to,
// status.vsphere (infrav1.VSphereStatus).
const StatusBlock = "vsphere"

// Defaults of the Driver's options.
const (
	// DefaultKeepAlive is how often an idle session is kept alive: well under vCenter's
	// default idle timeout of 30 minutes.
	DefaultKeepAlive = 5 * time.Minute
	// DefaultShutdownTimeout is how long a guest has to shut down before it is powered off.
	DefaultShutdownTimeout = 2 * time.Minute
	// DefaultResponseTimeout bounds the wait for vCenter's answer to one call, so a vCenter
	// that accepts connections but hangs is reported unreachable rather than blocking.
	DefaultResponseTimeout = 2 * time.Minute
)

// Driver connects to vCenters. It implements providersdk.Driver.
type Driver struct {
	keepAlive       time.Duration
	shutdownTimeout time.Duration
	responseTimeout time.Duration
	now             func() time.Time
}

var _ providersdk.Driver = (*Driver)(nil)

// Option configures a Driver.
type Option func(*Driver)

// WithKeepAlive sets how often an idle session is kept alive.
func WithKeepAlive(d time.Duration) Option { return func(dr *Driver) { dr.keepAlive = d } }

// WithShutdownTimeout sets how long a guest has to shut down on its own before the VM
// is powered off.
func WithShutdownTimeout(d time.Duration) Option {
	return func(dr *Driver) { dr.shutdownTimeout = d }
}

// WithResponseTimeout sets how long one call waits for vCenter's answer.
func WithResponseTimeout(d time.Duration) Option {
	return func(dr *Driver) { dr.responseTimeout = d }
}

// WithClock sets the clock the driver reads, for tests.
func WithClock(now func() time.Time) Option { return func(dr *Driver) { dr.now = now } }

// NewDriver returns a Driver configured by opts.
func NewDriver(opts ...Option) *Driver {
	d := &Driver{
		keepAlive:       DefaultKeepAlive,
		shutdownTimeout: DefaultShutdownTimeout,
		responseTimeout: DefaultResponseTimeout,
		now:             time.Now,
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Connect logs in to the Provider's vCenter and returns the session. It fails with
// providersdk.Unreachable when vCenter cannot be reached or its certificate not
// verified, providersdk.Unauthorized when it rejects the credentials, and
// providersdk.Permanent when the Provider or its Secret is incomplete.
func (d *Driver) Connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	return d.connect(ctx, info)
}

// MachineKind is the infrastructure machine kind of this provider.
var MachineKind = infrav1.GroupVersion.WithKind("VSphereMachine")

// Config describes the vSphere provider to providersdk.Setup, with a Driver made from opts.
func Config(opts ...Option) providersdk.Config {
	return providersdk.Config{Class: ProviderClass, MachineKind: MachineKind, Driver: NewDriver(opts...), StatusBlock: StatusBlock}
}
