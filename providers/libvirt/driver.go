package libvirt

import (
	"context"
	"time"

	"k8s.io/utils/ptr"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// ProviderClass is the provider class this driver serves.
const ProviderClass = "libvirt"

// Keys of the credentials Secret.
const (
	// SSHPrivateKeyKey holds the PEM private key for qemu+ssh (the key of Kubernetes'
	// kubernetes.io/ssh-auth Secrets).
	SSHPrivateKeyKey = host.SSHPrivateKeyKey
	// KnownHostsKey holds the known_hosts lines that verify the SSH host key; required.
	KnownHostsKey = host.KnownHostsKey
	// TLSCertKey holds the PEM client certificate for qemu+tls.
	TLSCertKey = host.TLSCertKey
	// TLSKeyKey holds the PEM client key for qemu+tls.
	TLSKeyKey = host.TLSKeyKey
	// CACertKey holds the PEM CA that signed libvirtd's certificate, when
	// spec.connection.caBundle does not give one.
	CACertKey = host.CACertKey
)

// Defaults of the Driver's options.
const (
	// DefaultShutdownTimeout is how long a guest has to shut down after the ACPI power
	// button before its domain is destroyed.
	DefaultShutdownTimeout = 2 * time.Minute
	// DefaultDialTimeout bounds the connection to libvirtd, including SSH and TLS handshakes.
	DefaultDialTimeout = 15 * time.Second
)

// Driver connects to libvirt hosts. It implements providersdk.Driver.
type Driver struct {
	shutdownTimeout time.Duration
	dialTimeout     time.Duration
	now             func() time.Time
	// createHook, for tests, runs at each stage of Create ("volumes", "defined"); an
	// error it returns stops Create there, as a crash would.
	createHook func(stage string) error
}

var _ providersdk.Driver = (*Driver)(nil)

// Option configures a Driver.
type Option func(*Driver)

// WithShutdownTimeout sets how long a guest has to shut down on its own before its
// domain is destroyed.
func WithShutdownTimeout(d time.Duration) Option {
	return func(dr *Driver) { dr.shutdownTimeout = d }
}

// WithDialTimeout sets how long connecting to libvirtd may take.
func WithDialTimeout(d time.Duration) Option { return func(dr *Driver) { dr.dialTimeout = d } }

// WithClock sets the clock the driver reads, for tests.
func WithClock(now func() time.Time) Option { return func(dr *Driver) { dr.now = now } }

// NewDriver returns a Driver configured by opts.
func NewDriver(opts ...Option) *Driver {
	d := &Driver{
		shutdownTimeout: DefaultShutdownTimeout,
		dialTimeout:     DefaultDialTimeout,
		now:             time.Now,
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Connect opens the connection to the Provider's libvirtd and returns the session. It
// fails with providersdk.Unreachable when libvirtd cannot be reached or its host not
// verified, providersdk.Unauthorized when it rejects the credentials, and
// providersdk.Permanent when the Provider or its Secret is incomplete.
func (d *Driver) Connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	p := info.Provider
	if p == nil {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "the Provider is missing")
	}
	h, err := host.Connect(ctx, host.Config{
		Endpoint:              p.Spec.Connection.Endpoint,
		Credentials:           info.Credentials,
		SecretRef:             info.SecretRef(),
		CABundle:              info.CABundle,
		InsecureSkipTLSVerify: ptr.Deref(p.Spec.Connection.InsecureSkipTLSVerify, false),
		DialTimeout:           d.dialTimeout,
		Class:                 ProviderClass,
	})
	if err != nil {
		return nil, err
	}
	return newSession(d, h, info), nil
}

// MachineKind is the infrastructure machine kind of this provider.
var MachineKind = infrav1.GroupVersion.WithKind("LibvirtMachine")

// Config describes the libvirt provider to providersdk.Setup, with a Driver made from opts.
func Config(opts ...Option) providersdk.Config {
	return providersdk.Config{Class: ProviderClass, MachineKind: MachineKind, Driver: NewDriver(opts...), StatusBlock: "libvirt"}
}
