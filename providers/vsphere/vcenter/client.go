package vcenter

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/session/keepalive"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Config is what Connect logs in with.
type Config struct {
	// URL is vCenter's SDK endpoint, e.g. https://vc.example.com/sdk, without credentials.
	URL *url.URL
	// Insecure turns certificate verification off, for test backends only.
	Insecure bool
	// RootCAs verify vCenter's certificate; nil means the system roots.
	RootCAs *x509.CertPool
	// ResponseTimeout bounds the wait for vCenter's answer to one call.
	ResponseTimeout time.Duration
	// KeepAlive is how often an idle session is kept alive.
	KeepAlive time.Duration
	// Username and Password are the vCenter credentials. They are never put in an error.
	Username, Password string
	// SecretRef names the credentials Secret as "<namespace>/<name>", for messages.
	SecretRef string
	// IdentityKey is the extraConfig key whose value VM.Identity reports: it is read with
	// every VM, one key rather than the whole extraConfig (which holds the user data).
	IdentityKey string
	// MarkKeys are the other extraConfig keys of the identity mark, which MarkedVMs reads
	// into VM.Marks.
	MarkKeys []string
	// MetricsClass is the provider class every call is counted under in
	// providersdk.BackendCalls.
	MetricsClass string
}

// Client is one logged-in session to a vCenter, safe for concurrent use.
type Client struct {
	vim  *vim25.Client
	soap *soap.Client
	auth *authenticator

	// host is vCenter's host[:port] and secretRef the credentials Secret, for messages.
	host      string
	secretRef string
	// network names vCenter in the messages of network problems.
	network providersdk.Endpoint
	// identityKey and vmProperties are what a VM read asks for.
	identityKey  string
	vmProperties []string
	// markKeys are the mark's other extraConfig keys, which MarkedVMs reads.
	markKeys []string
}

// Ref is a managed object reference: its type ("VirtualMachine", "Folder", …) and its
// ID ("vm-42"). The zero Ref names nothing.
type Ref struct {
	// Type is the managed object's type.
	Type string
	// Value is the managed object's ID.
	Value string
}

// IsZero reports whether r names nothing.
func (r Ref) IsZero() bool { return r.Value == "" }

// ref is r as govmomi takes it.
func (r Ref) ref() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: r.Type, Value: r.Value}
}

// refOf is a govmomi reference as a Ref.
func refOf(r types.ManagedObjectReference) Ref { return Ref{Type: r.Type, Value: r.Value} }

// ParseURL parses a vCenter endpoint as govmomi does: https:// is added to a bare host,
// /sdk to a URL without a path, and a trailing slash is dropped.
func ParseURL(endpoint string) (*url.URL, error) { return soap.ParseURL(endpoint) }

// Connect logs in to vCenter once and keeps the session alive. It fails with
// providersdk.Unreachable when vCenter cannot be reached or its certificate not
// verified, and providersdk.Unauthorized when it rejects the credentials.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	sc := soap.NewClient(cfg.URL, cfg.Insecure)
	tr := sc.DefaultTransport()
	tr.ResponseHeaderTimeout = cfg.ResponseTimeout
	tr.MaxIdleConnsPerHost = providersdk.IdleConnsPerBackend
	if !cfg.Insecure {
		tr.TLSClientConfig.RootCAs = cfg.RootCAs
	}
	sc.Client.Transport = drainingTransport{tr}
	c := &Client{
		soap:        sc,
		host:        cfg.URL.Host,
		secretRef:   cfg.SecretRef,
		network:     providersdk.Endpoint{Kind: "vCenter", Host: cfg.URL.Host, RefusedHint: " and that vCenter is running"},
		identityKey: cfg.IdentityKey,
		markKeys:    cfg.MarkKeys,
	}
	c.vmProperties = append(append([]string{}, vmProperties...), c.identityProperty())
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, c.fail("connect to vCenter", err)
	}
	c.vim = vc
	ka := keepalive.NewHandlerSOAP(sc, cfg.KeepAlive, nil)
	c.auth = &authenticator{
		next: ka, sessionManager: *vc.ServiceContent.SessionManager,
		user: cfg.Username, password: cfg.Password, class: cfg.MetricsClass,
	}
	vc.RoundTripper = c.auth
	if err := c.auth.login(ctx); err != nil {
		ka.Stop()
		return nil, c.fail("log in to vCenter", err)
	}
	return c, nil
}

// Close logs out; a session vCenter has already forgotten is closed too. Every call
// after it fails with providersdk.ErrSessionClosed without reaching vCenter.
func (c *Client) Close(ctx context.Context) error {
	defer c.soap.CloseIdleConnections()
	c.auth.close()
	if _, err := methods.Logout(ctx, c.vim, &types.Logout{This: c.auth.sessionManager}); err != nil {
		if fault.Is(err, &types.NotAuthenticated{}) {
			return nil
		}
		return c.fail("log out of vCenter", err)
	}
	return nil
}

// RootFolder is the root of vCenter's inventory.
func (c *Client) RootFolder() Ref { return refOf(c.vim.ServiceContent.RootFolder) }

// authenticator is the session's soap.RoundTripper: it logs in again, once, when vCenter
// says the session is not authenticated (vCenter restarted, or the session expired), and
// retries the call. Once the Client is closed it sends nothing more, Logout aside: a
// login then would open a session with the credentials the Provider replaced, which
// the keepalive would hold open on vCenter for as long as the process runs.
type authenticator struct {
	next           *keepalive.HandlerSOAP
	sessionManager types.ManagedObjectReference
	user, password string
	class          string

	mu sync.Mutex
	// generation counts logins, so concurrent calls that fail together log in once.
	generation int
	// closed is set by Client.Close.
	closed bool
}

// close makes every later call fail with providersdk.ErrSessionClosed.
func (a *authenticator) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
}

// current returns the login generation, or providersdk.ErrSessionClosed once closed.
func (a *authenticator) current() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, providersdk.ErrSessionClosed
	}
	return a.generation, nil
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
	providersdk.CountBackendCall(a.class, strings.TrimSuffix(reflect.TypeOf(req).Elem().Name(), "Body"), err)
	return err
}

// RoundTrip implements soap.RoundTripper, counting every call it makes to vCenter.
func (a *authenticator) RoundTrip(ctx context.Context, req, res soap.HasFault) error {
	switch req.(type) {
	case *methods.LoginBody, *methods.LogoutBody:
		return a.counted(ctx, req, res)
	}
	gen, err := a.current()
	if err != nil {
		return err
	}
	err = a.counted(ctx, req, res)
	if !notAuthenticated(err, res) {
		return err
	}
	if err := a.relogin(ctx, gen); err != nil {
		return err
	}
	// The decoder fills the response in place; start the retry from a clean one.
	v := reflect.ValueOf(res).Elem()
	v.Set(reflect.Zero(v.Type()))
	err = a.counted(ctx, req, res)
	if notAuthenticated(err, res) && err == nil {
		return soap.WrapVimFault(&types.NotAuthenticated{})
	}
	return err
}

// relogin logs in again unless a call that failed with the same login (gen) already
// did, or the Client was closed meanwhile.
func (a *authenticator) relogin(ctx context.Context, gen int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return providersdk.ErrSessionClosed
	case a.generation != gen:
		return nil
	}
	return a.loginLocked(ctx)
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

// drainingTransport reads what is left of a response body before closing it. govmomi
// decodes a SOAP envelope and closes the body without reading past its end: when the
// end of the chunked body had not arrived with the envelope, net/http closes the
// connection rather than reuse it, and the next call makes a new TLS connection. That
// was half of the calls, a handshake's CPU each on the provider and on vCenter.
type drainingTransport struct{ next http.RoundTripper }

// maxDrain bounds what Close reads of a body left unread: more is not worth a
// connection.
const maxDrain = 64 << 10

func (t drainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err == nil && res.Body != nil {
		res.Body = drainingBody{res.Body}
	}
	return res, err
}

type drainingBody struct{ io.ReadCloser }

func (b drainingBody) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, maxDrain))
	return b.ReadCloser.Close()
}
