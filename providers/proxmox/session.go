package proxmox

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/luthermonson/go-proxmox"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

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

// Keys of the Provider's spec.parameters this driver reads.
const (
	// ParamSnippetsStorage names the storage that holds cloud-init snippets.
	ParamSnippetsStorage = "snippetsStorage"
	// ParamPool is the resource pool new VMs join.
	ParamPool = "pool"
	// ParamNode limits the failure domains to these comma-separated nodes; the first
	// online one also receives image imports.
	ParamNode = "node"
	// ParamImageStorage names the storage that Url images are downloaded to; it needs
	// the import content type.
	ParamImageStorage = "imageStorage"
	// ParamTemplateStorage names the storage that holds the disks of imported
	// templates.
	ParamTemplateStorage = "templateStorage"
)

// session is one authenticated client of a PVE cluster: the providersdk.Client of a
// Provider.
type session struct {
	driver *Driver
	api    *proxmox.Client
	http   *http.Client

	// host is the API's host:port, for messages; secretRef is the credentials Secret's
	// "<namespace>/<name>".
	host      string
	secretRef string
	// endpoint names the cluster in the messages of network problems.
	endpoint providersdk.Endpoint
	// cluster is the cluster's name, or the Provider's for a standalone node.
	cluster string

	nodes           []string
	snippetsStorage string
	pool            string
	storageClasses  []classTarget
	networkClasses  []classTarget
	features        []string
	imageStorage    string
	templateStorage string

	// importsMu guards imports, each image's import as this session knows it.
	importsMu sync.Mutex
	imports   map[k8stypes.UID]*importState

	// placesMu guards places: where this session last found each machine's VM, by
	// machine UID, which lookups try before listing the cluster.
	placesMu sync.Mutex
	places   map[k8stypes.UID]location

	// listingsMu guards listings: the guest listing Observe last read for a machine
	// whose VM it did not find, by machine UID, which the Create of the same reconcile
	// takes instead of listing again (see keepListing).
	listingsMu sync.Mutex
	listings   map[k8stypes.UID]listing

	// clonesMu guards clones: the clone tasks this session started and has not seen
	// end, by UPID, with the machine each makes a VM for.
	clonesMu sync.Mutex
	clones   map[string]startedClone

	// vmids is held, by whoever holds it, from /cluster/nextid until the request that
	// takes the VMID is answered: the driver's one for the cluster (see Driver.vmidLock).
	vmids chan struct{}
}

var _ providersdk.Client = (*session)(nil)

// classTarget is a storage or network class and its backend objects.
type classTarget struct {
	name   string
	target map[string]string
}

// connect builds the session for info and checks it with one call that also tells the
// cluster's name.
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
	auth, err := credentials(info.Credentials, secretRef)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = d.responseTimeout
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case ptr.Deref(p.Spec.Connection.InsecureSkipTLSVerify, false):
		tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // asked for by the Provider, for test backends
	default:
		if tr.TLSClientConfig.RootCAs, err = info.RootCAs(); err != nil {
			return nil, err
		}
	}
	hc := &http.Client{Transport: &countingTransport{next: tr, base: u.Path}}
	s := &session{
		driver:    d,
		http:      hc,
		api:       proxmox.NewClient(u.String(), proxmox.WithHTTPClient(hc), auth),
		host:      u.Host,
		secretRef: secretRef,
		endpoint: providersdk.Endpoint{Kind: "Proxmox VE", Host: u.Host, CAHint: "/etc/pve/pve-root-ca.pem on a node",
			RefusedHint: " (port 8006) and that pveproxy runs"},
		snippetsStorage: p.Spec.Parameters[ParamSnippetsStorage],
		pool:            p.Spec.Parameters[ParamPool],
		features:        p.Spec.Capabilities.Features,
		imageStorage:    p.Spec.Parameters[ParamImageStorage],
		templateStorage: p.Spec.Parameters[ParamTemplateStorage],
		imports:         map[k8stypes.UID]*importState{},
		places:          map[k8stypes.UID]location{},
		listings:        map[k8stypes.UID]listing{},
		clones:          map[string]startedClone{},
	}
	for _, n := range strings.Split(p.Spec.Parameters[ParamNode], ",") {
		if n = strings.TrimSpace(n); n != "" {
			s.nodes = append(s.nodes, n)
		}
	}
	for _, c := range p.Spec.Capabilities.StorageClasses {
		s.storageClasses = append(s.storageClasses, classTarget{name: c.Name, target: c.Target})
	}
	for _, c := range p.Spec.Capabilities.NetworkClasses {
		s.networkClasses = append(s.networkClasses, classTarget{name: c.Name, target: c.Target})
	}
	clustered := false
	if s.cluster, clustered, err = s.clusterName(ctx, p.Name); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	// Sessions of the same cluster (two Providers, or a session and the one that
	// replaces it) share the lock; a standalone node is known by its address.
	if clustered {
		s.vmids = d.vmidLock("cluster " + s.cluster)
	} else {
		s.vmids = d.vmidLock("node " + u.Host)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Connected to Proxmox VE", "endpoint", u.String(), "cluster", s.cluster)
	return s, nil
}

// clusterName reads /cluster/status: the cluster's name, or fallback on a standalone
// node, which has no cluster entry; clustered tells which.
func (s *session) clusterName(ctx context.Context, fallback string) (name string, clustered bool, err error) {
	var status []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := s.get(ctx, "/cluster/status", nil, &status); err != nil {
		return "", false, err
	}
	for _, e := range status {
		if e.Type == "cluster" && e.Name != "" {
			return e.Name, true, nil
		}
	}
	return fallback, false, nil
}

// Disconnect closes the session's idle connections. API tokens have no session to end,
// and a ticket simply expires.
func (s *session) Disconnect(context.Context) error {
	s.http.CloseIdleConnections()
	return nil
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
