package vsphere

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// Keys of the credentials Secret.
const (
	// UsernameKey is the Secret key holding the vCenter user name.
	UsernameKey = "username"
	// PasswordKey is the Secret key holding the vCenter password.
	PasswordKey = "password"
)

// session is one logged-in connection to a vCenter: the providersdk.Client of a Provider.
type session struct {
	driver *Driver
	vc     *vcenter.Client

	// host is vCenter's host[:port], for messages; endpoint is its URL without credentials.
	host     string
	endpoint string

	params         parameters
	storageClasses []providersdk.ClassTarget
	networkClasses []providersdk.ClassTarget
	features       []string

	mu        sync.Mutex
	inventory *inventory

	// claims serialises the adoptions of each VM (Adopt).
	claims claims

	imports *providersdk.Imports
}

var (
	_ providersdk.Client               = (*session)(nil)
	_ providersdk.InventoryReader      = (*session)(nil)
	_ providersdk.ImageResolver        = (*session)(nil)
	_ providersdk.GuestAddressReporter = (*session)(nil)
	_ providersdk.OrphanLister         = (*session)(nil)
)

// parameters are the Provider's spec.parameters this driver reads.
type parameters struct {
	datacenter   string
	folder       string
	resourcePool string
	datastore    string
	// hotplug is what new VMs may grow while they run; hotplugErr says why
	// parameters.hotplug does not parse, which the Provider then reports.
	hotplug    providersdk.Hotplug
	hotplugErr error
}

// connect builds the session for info: TLS, one login, keepalive. It returns the
// session as the Client interface, and a nil interface (never a nil *session) with an
// error.
func (d *Driver) connect(ctx context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
	p := info.Provider
	if p == nil {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "the Provider is missing")
	}
	u, err := endpointURL(p.Spec.Connection.Endpoint)
	if err != nil {
		return nil, err
	}
	secretRef := info.SecretRef()
	user, password, err := credentials(info.Credentials, secretRef)
	if err != nil {
		return nil, err
	}
	cfg := vcenter.Config{
		URL:             u,
		Insecure:        ptr.Deref(p.Spec.Connection.InsecureSkipTLSVerify, false),
		ResponseTimeout: d.responseTimeout,
		KeepAlive:       d.keepAlive,
		Username:        user,
		Password:        password,
		SecretRef:       secretRef,
		IdentityKey:     ExtraConfigMachineUID,
		MarkKeys:        markKeys,
		MetricsClass:    ProviderClass,
	}
	if !cfg.Insecure {
		if cfg.RootCAs, err = info.RootCAs(); err != nil {
			return nil, err
		}
	}
	vc, err := vcenter.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &session{
		driver:   d,
		vc:       vc,
		host:     u.Host,
		endpoint: u.String(),
		params: parameters{
			datacenter:   p.Spec.Parameters["datacenter"],
			folder:       p.Spec.Parameters["folder"],
			resourcePool: p.Spec.Parameters["resourcePool"],
			datastore:    p.Spec.Parameters["datastore"],
		},
		storageClasses: info.StorageClasses(),
		networkClasses: info.NetworkClasses(),
		features:       p.Spec.Capabilities.Features,
		imports:        providersdk.NewImports(d.now, providersdk.ImportLimitsFrom(p.Spec.Parameters)),
	}
	s.params.hotplug, s.params.hotplugErr = providersdk.HotplugFrom(p.Spec.Parameters)
	ctrl.LoggerFrom(ctx).V(1).Info("Logged in to vCenter", "endpoint", s.endpoint)
	return s, nil
}

// Disconnect stops the session's imports and logs out.
func (s *session) Disconnect(ctx context.Context) error {
	s.imports.Stop()
	return s.vc.Close(ctx)
}

// endpointURL parses a vCenter endpoint: a URL, or a bare host to which https:// and
// /sdk are added. Credentials, a query, a fragment and trailing slashes are dropped, and
// a URL without a path gets /sdk, so that the result parses to itself.
func endpointURL(endpoint string) (*url.URL, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint is empty")
	}
	u, err := vcenter.ParseURL(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason,
			"spec.connection.endpoint %q is not a vCenter URL such as https://vcenter.example.com/sdk", endpoint)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason,
			"spec.connection.endpoint %q must be an https URL", endpoint)
	}
	u.User = nil
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment, u.RawPath = "", false, "", "", ""
	if u.Path = strings.TrimRight(u.Path, "/"); u.Path == "" {
		u.Path = "/sdk"
	}
	return u, nil
}

// credentials reads the user name and password from the Secret's data. Errors name the
// key that is missing, empty or not a single line, never a value.
func credentials(data map[string][]byte, secretRef string) (user, password string, err error) {
	for _, k := range []string{UsernameKey, PasswordKey} {
		if problem := providersdk.CredentialProblem(data, k); problem != "" {
			return "", "", providersdk.Permanent(infrav1.MachineFailedReason,
				"credentials Secret %s %s (it needs %q and %q)", secretRef, problem, UsernameKey, PasswordKey)
		}
	}
	return string(data[UsernameKey]), string(data[PasswordKey]), nil
}
