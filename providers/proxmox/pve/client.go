package pve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Keys of the credentials Secret: either an API token or a user and password.
const (
	// TokenIDKey is the Secret key holding an API token's ID, user@realm!name.
	TokenIDKey = "tokenID"
	// TokenSecretKey is the Secret key holding the API token's secret.
	TokenSecretKey = "tokenSecret"
	// UsernameKey is the Secret key holding a user name, user@realm.
	UsernameKey = "username"
	// PasswordKey is the Secret key holding the user's password.
	PasswordKey = "password"
)

// Connection is how a Client reaches a PVE API.
type Connection struct {
	// Endpoint is the API's URL, or a bare host[:port], to which https://, port 8006
	// and /api2/json are added as needed.
	Endpoint string
	// Credentials is the data of the credentials Secret: an API token, or a user and
	// password. It never appears in an error.
	Credentials map[string][]byte
	// SecretRef names the credentials Secret, "<namespace>/<name>", for messages.
	SecretRef string
	// InsecureSkipTLSVerify turns off the verification of PVE's certificate.
	InsecureSkipTLSVerify bool
	// RootCAs returns the pool PVE's certificate is verified against, nil for the
	// system roots. It is called only when InsecureSkipTLSVerify is false; nil means
	// the system roots.
	RootCAs func() (*x509.CertPool, error)
	// ResponseTimeout bounds the wait for PVE's answer to one call, so a node that
	// accepts connections but hangs is reported unreachable rather than blocking.
	ResponseTimeout time.Duration
	// Class is the provider class the calls are counted under in
	// providersdk.BackendCalls.
	Class string
	// WrapTransport, when set, wraps the HTTP transport under the call counting;
	// tests use it to hold a call back at a chosen moment.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Client is an authenticated client of one PVE cluster (or standalone node). It is
// safe for concurrent use.
type Client struct {
	api  *proxmox.Client
	http *http.Client
	// transport is http's, which Close closes.
	transport *countingTransport
	url       *url.URL
	// secretRef is the credentials Secret's "<namespace>/<name>", for messages.
	secretRef string
	// endpoint names the cluster in the messages of network problems.
	endpoint providersdk.Endpoint
	// resources shares the cluster's listing among concurrent callers.
	resources *coalesced[Resource]
}

// New builds the Client of conn. It makes no call: Cluster is the first one. It fails
// with a Permanent error when the endpoint or the credentials are unusable, naming
// what is wrong and never a secret.
func New(conn Connection) (*Client, error) {
	u, err := endpointURL(conn.Endpoint)
	if err != nil {
		return nil, err
	}
	auth, err := credentials(conn.Credentials, conn.SecretRef)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = conn.ResponseTimeout
	tr.MaxIdleConnsPerHost = providersdk.IdleConnsPerBackend
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case conn.InsecureSkipTLSVerify:
		tr.TLSClientConfig.InsecureSkipVerify = true // asked for by the Provider, for test backends
	case conn.RootCAs != nil:
		if tr.TLSClientConfig.RootCAs, err = conn.RootCAs(); err != nil {
			return nil, err
		}
	}
	var next http.RoundTripper = tr
	if conn.WrapTransport != nil {
		next = conn.WrapTransport(tr)
	}
	ct := &countingTransport{next: next, base: u.Path, class: conn.Class}
	hc := &http.Client{Transport: ct}
	return &Client{
		api:       proxmox.NewClient(u.String(), proxmox.WithHTTPClient(hc), auth),
		http:      hc,
		transport: ct,
		url:       u,
		secretRef: conn.SecretRef,
		resources: newCoalesced[Resource](),
		endpoint: providersdk.Endpoint{Kind: "Proxmox VE", Host: u.Host, CAHint: "/etc/pve/pve-root-ca.pem on a node",
			RefusedHint: " (port 8006) and that pveproxy runs"},
	}, nil
}

// Host is the API's host:port.
func (c *Client) Host() string { return c.url.Host }

// URL is the API's URL, for logs.
func (c *Client) URL() string { return c.url.String() }

// Close closes the client's idle connections; every call after it fails with
// providersdk.ErrSessionClosed without reaching PVE. API tokens have no session to end,
// and a ticket simply expires.
func (c *Client) Close() {
	c.transport.closed.Store(true)
	c.http.CloseIdleConnections()
}

// ClusterStatus is what PVE says of the cluster it belongs to.
type ClusterStatus struct {
	// Name is the cluster's name; "" on a standalone node.
	Name string
	// Clustered is false on a standalone node, which has no cluster entry.
	Clustered bool
}

// Cluster reads /cluster/status: the cluster's name, if the node is in one.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var status []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := c.get(ctx, "/cluster/status", nil, &status); err != nil {
		return ClusterStatus{}, err
	}
	for _, e := range status {
		if e.Type == "cluster" && e.Name != "" {
			return ClusterStatus{Name: e.Name, Clustered: true}, nil
		}
	}
	return ClusterStatus{}, nil
}

// get reads path with query parameters into v.
func (c *Client) get(ctx context.Context, path string, query map[string]string, v any) error {
	path = withQuery(path, query)
	return c.fail("GET "+path, c.api.Get(ctx, path, v))
}

// post posts params to path; the answer, a UPID for asynchronous methods, goes to v.
func (c *Client) post(ctx context.Context, path string, params map[string]any, v any) error {
	return c.fail("POST "+path, c.api.Post(ctx, path, params, v))
}

// put puts params to path; the answer, a UPID for asynchronous methods, goes to v.
func (c *Client) put(ctx context.Context, path string, params map[string]any, v any) error {
	return c.fail("PUT "+path, c.api.Put(ctx, path, params, v))
}

// del deletes path with query parameters; the answer, a UPID, goes to v.
func (c *Client) del(ctx context.Context, path string, query map[string]string, v any) error {
	path = withQuery(path, query)
	return c.fail("DELETE "+path, c.api.Delete(ctx, path, v))
}

// withQuery appends query parameters to path.
func withQuery(path string, query map[string]string) string {
	if len(query) == 0 {
		return path
	}
	q := url.Values{}
	for k, val := range query {
		q.Set(k, val)
	}
	return path + "?" + q.Encode()
}

// endpointURL parses a PVE endpoint: a URL, or a bare host[:port], to which https://,
// port 8006 and /api2/json are added as needed.
func endpointURL(endpoint string) (*url.URL, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint is empty")
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason,
			"spec.connection.endpoint %q is not a Proxmox VE URL such as https://pve.example.com:8006/api2/json", endpoint)
	}
	if u.Scheme != "https" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint %q must be an https URL", endpoint)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "8006")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if u.Path == "" {
		u.Path = "/api2/json"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment, u.RawPath = nil, "", false, "", "", ""
	return u, nil
}

// credentials reads an API token, or else a user and password, from the Secret's data.
// Errors name the key that is missing, empty or not a single line, never a value.
func credentials(data map[string][]byte, secretRef string) (proxmox.Option, error) {
	keys := []string{UsernameKey, PasswordKey}
	if len(data[TokenIDKey]) > 0 || len(data[TokenSecretKey]) > 0 {
		keys = []string{TokenIDKey, TokenSecretKey}
	}
	for _, k := range keys {
		if problem := providersdk.CredentialProblem(data, k); problem != "" {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason,
				"credentials Secret %s %s (it needs %q and %q, or %q and %q)",
				secretRef, problem, TokenIDKey, TokenSecretKey, UsernameKey, PasswordKey)
		}
	}
	if keys[0] == TokenIDKey {
		return proxmox.WithAPIToken(string(data[TokenIDKey]), string(data[TokenSecretKey])), nil
	}
	return proxmox.WithCredentials(&proxmox.Credentials{
		Username: string(data[UsernameKey]), Password: string(data[PasswordKey]),
	}), nil
}
