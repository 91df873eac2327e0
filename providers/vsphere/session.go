package vsphere

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"sync"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/session/keepalive"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
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
	vim    *vim25.Client
	soap   *soap.Client

	// host is vCenter's host[:port], for messages; endpoint is its URL without credentials.
	host     string
	endpoint string
	// secretRef is "<namespace>/<name>" of the credentials Secret, for messages.
	secretRef string
	// network names vCenter in the messages of network problems.
	network providersdk.Endpoint

	params         parameters
	storageClasses []classTarget
	networkClasses []classTarget
	features       []string

	auth *authenticator

	mu        sync.Mutex
	inventory *inventory

	imports *providersdk.Imports
}

var _ providersdk.Client = (*session)(nil)

// parameters are the Provider's spec.parameters this driver reads.
type parameters struct {
	datacenter   string
	folder       string
	resourcePool string
	datastore    string
}

// classTarget is a storage or network class and its backend objects.
type classTarget struct {
	name   string
	target map[string]string
}

// connect builds the session for info: TLS, one login, keepalive.
func (d *Driver) connect(ctx context.Context, info providersdk.ProviderInfo) (*session, error) {
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

	sc := soap.NewClient(u, p.Spec.Connection.InsecureSkipTLSVerify)
	tr := sc.DefaultTransport()
	tr.ResponseHeaderTimeout = d.responseTimeout
	if !p.Spec.Connection.InsecureSkipTLSVerify {
		if tr.TLSClientConfig.RootCAs, err = info.RootCAs(); err != nil {
			return nil, err
		}
	}

	s := &session{
		driver:    d,
		soap:      sc,
		host:      u.Host,
		endpoint:  u.String(),
		secretRef: secretRef,
		network:   providersdk.Endpoint{Kind: "vCenter", Host: u.Host, RefusedHint: " and that vCenter is running"},
		params: parameters{
			datacenter:   p.Spec.Parameters["datacenter"],
			folder:       p.Spec.Parameters["folder"],
			resourcePool: p.Spec.Parameters["resourcePool"],
			datastore:    p.Spec.Parameters["datastore"],
		},
		features: p.Spec.Capabilities.Features,
	}
	for _, c := range p.Spec.Capabilities.StorageClasses {
		s.storageClasses = append(s.storageClasses, classTarget{name: c.Name, target: c.Target})
	}
	for _, c := range p.Spec.Capabilities.NetworkClasses {
		s.networkClasses = append(s.networkClasses, classTarget{name: c.Name, target: c.Target})
	}

	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, s.fail("connect to vCenter", err)
	}
	s.vim = vc
	ka := keepalive.NewHandlerSOAP(sc, d.keepAlive, nil)
	s.auth = &authenticator{next: ka, sessionManager: *vc.ServiceContent.SessionManager, user: user, password: password}
	vc.RoundTripper = s.auth
	if err := s.auth.login(ctx); err != nil {
		ka.Stop()
		return nil, s.fail("log in to vCenter", err)
	}
	s.imports = providersdk.NewImports(d.now)
	ctrl.LoggerFrom(ctx).V(1).Info("Logged in to vCenter", "endpoint", s.endpoint)
	return s, nil
}

// Disconnect stops the session's imports and logs out.
func (s *session) Disconnect(ctx context.Context) error {
	s.imports.Stop()
	defer s.soap.CloseIdleConnections()
	if _, err := methods.Logout(ctx, s.vim, &types.Logout{This: s.auth.sessionManager}); err != nil {
		if fault.Is(err, &types.NotAuthenticated{}) {
			return nil
		}
		return s.fail("log out of vCenter", err)
	}
	return nil
}

// endpointURL parses a vCenter endpoint: a URL, or a bare host to which https:// and
// /sdk are added. Credentials, a query, a fragment and trailing slashes are dropped, and
// a URL without a path gets /sdk, so that the result parses to itself.
func endpointURL(endpoint string) (*url.URL, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint is empty")
	}
	u, err := soap.ParseURL(endpoint)
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

// authenticator is the session's soap.RoundTripper: it logs in again, once, when vCenter
// says the session is not authenticated (vCenter restarted, or the session expired), and
// retries the call.
type authenticator struct {
	next           *keepalive.HandlerSOAP
	sessionManager types.ManagedObjectReference
	user, password string

	mu sync.Mutex
	// generation counts logins, so concurrent calls that fail together log in once.
	generation int
}

// login logs in and starts the keepalive.
func (a *authenticator) login(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loginLocked(ctx)
}

func (a *authenticator) loginLocked(ctx context.Context) error {
	_, err := methods.Login(ctx, soapFunc(a.counted), &types.Login{This: a.sessionManager, UserName: a.user, Password: a.password})
	if err != nil {
		return err
	}
	a.generation++
	return nil
}

// counted sends one call to vCenter and records it in providersdk.BackendCalls under
// the call's SOAP method name.
func (a *authenticator) counted(ctx context.Context, req, res soap.HasFault) error {
	err := a.next.RoundTrip(ctx, req, res)
	providersdk.CountBackendCall(ProviderClass, strings.TrimSuffix(reflect.TypeOf(req).Elem().Name(), "Body"), err)
	return err
}

// RoundTrip implements soap.RoundTripper, counting every call it makes to vCenter.
func (a *authenticator) RoundTrip(ctx context.Context, req, res soap.HasFault) error {
	switch req.(type) {
	case *methods.LoginBody, *methods.LogoutBody:
		return a.counted(ctx, req, res)
	}
	a.mu.Lock()
	gen := a.generation
	a.mu.Unlock()

	err := a.counted(ctx, req, res)
	if !notAuthenticated(err, res) {
		return err
	}
	a.mu.Lock()
	if a.generation == gen {
		if lerr := a.loginLocked(ctx); lerr != nil {
			a.mu.Unlock()
			return lerr
		}
	}
	a.mu.Unlock()
	// The decoder fills the response in place; start the retry from a clean one.
	v := reflect.ValueOf(res).Elem()
	v.Set(reflect.Zero(v.Type()))
	err = a.counted(ctx, req, res)
	if notAuthenticated(err, res) && err == nil {
		return soap.WrapVimFault(&types.NotAuthenticated{})
	}
	return err
}

// notAuthenticated reports whether a call failed because the session is gone: a
// NotAuthenticated fault, or (for the property collector) one in a missing set.
func notAuthenticated(err error, res soap.HasFault) bool {
	if err != nil {
		return fault.Is(err, &types.NotAuthenticated{})
	}
	body, ok := res.(*methods.RetrievePropertiesExBody)
	if !ok || body.Res == nil || body.Res.Returnval == nil {
		return false
	}
	for _, o := range body.Res.Returnval.Objects {
		for _, m := range o.MissingSet {
			if _, ok := m.Fault.Fault.(*types.NotAuthenticated); ok {
				return true
			}
		}
	}
	return false
}

// soapFunc adapts a function to soap.RoundTripper.
type soapFunc func(ctx context.Context, req, res soap.HasFault) error

// RoundTrip calls f.
func (f soapFunc) RoundTrip(ctx context.Context, req, res soap.HasFault) error {
	return f(ctx, req, res)
}
