package proxmoxsim

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/banlieue/banlieue/sim/faultproxy"
	"github.com/banlieue/banlieue/sim/simcert"
)

// Default credentials of the simulator.
const (
	// DefaultUsername is the user that logs in with a password when Options.Username
	// is empty.
	DefaultUsername = "root@pam"
	// DefaultPassword is DefaultUsername's password when Options.Password is empty.
	DefaultPassword = "banlieue-dev" //nolint:gosec // the simulator's fixed, documented test password
	// DefaultTokenID is the API token accepted when Options.TokenID is empty.
	DefaultTokenID = "root@pam!banlieue" //nolint:gosec // the simulator's fixed, documented test token ID
	// DefaultTemplate is the template made when Options.Templates is nil, with VMID
	// FirstTemplateVMID, on the first node.
	DefaultTemplate = "ubuntu-2204-tpl"
	// FirstTemplateVMID is the VMID of the first template; the others follow in name
	// order.
	FirstTemplateVMID = 9000
	// ClusterName is the name of the simulated cluster.
	ClusterName = "banlieue"
)

// Options shape the simulated cluster.
type Options struct {
	// Addr is where the API listens, host:port; "127.0.0.1:0" when empty.
	Addr string
	// Nodes are the cluster's node names; pve1 and pve2 when empty. The first one
	// serves the API and forwards requests for the others, as the node a client talks
	// to does.
	Nodes []string
	// Storages are the storages; DefaultStorages when nil.
	Storages []Storage
	// Bridges are the Linux bridges every node has; vmbr0 when nil.
	Bridges []string
	// Pools are the resource pools that exist at start.
	Pools []string
	// Templates maps a template name to the node holding it; DefaultTemplate on the
	// first node when nil, none when empty. VMIDs are FirstTemplateVMID onwards in
	// name order.
	Templates map[string]string
	// GuestAgentDelay is how long after start a VM's guest agent answers and reports
	// addresses; 0 means at once, a negative value never.
	GuestAgentDelay time.Duration
	// TaskDelays is how long tasks of a type (qmclone, qmstart, download, …) run
	// before they finish; TaskDelay for the types not listed.
	TaskDelays map[string]time.Duration
	// TaskDelay is how long tasks of the other types run.
	TaskDelay time.Duration
	// StatusInterval is how often pvestatd reports guests' status: /cluster/resources
	// shows a guest's name, status and template flag as of the last report, and a new
	// guest with status unknown and without them until its first one (see
	// reportedFields). PVE's DefaultStatusInterval when 0; a negative value reports
	// every change at once.
	StatusInterval time.Duration
	// LockTimeout is how long a config change, resize, power action or destroy waits for
	// a VM's config lock that another task holds before it fails with "can't lock file
	// … - got timeout", as PVE's lock_config does. PVE's DefaultLockTimeout when 0; a
	// negative value does not wait. Clone workers wait a second, or LockTimeout when
	// shorter.
	LockTimeout time.Duration
	// ForkDelay is how long a forked worker takes to start (take its locks, write a
	// clone's first config) after the request answered with its UPID; 0 starts it
	// within the request. On PVE it is some milliseconds, in which a second clone onto
	// the same VMID passes the API's checks and then fails in its worker.
	ForkDelay time.Duration
	// UnauthorizedDelay holds back every 401 answer, counted from when the request
	// came in; 3 seconds, as pveproxy, when 0, and not at all when negative (for
	// tests).
	UnauthorizedDelay time.Duration
	// Username and Password log in with a ticket; DefaultUsername and
	// DefaultPassword when empty.
	Username, Password string
	// TokenID (user@realm!name) and TokenSecret are the API token; DefaultTokenID and
	// a random UUID when empty.
	TokenID, TokenSecret string
	// Users and Tokens add more users (user@realm → password) and API tokens
	// (user@realm!name → secret). Users other than root@pam have only the privileges
	// ACL grants them.
	Users, Tokens map[string]string
	// PrivSep lists the API tokens with privilege separation (PVE's privsep=1): such a
	// token has the privileges its own ACL entries grant, as far as its user has
	// them too. The other tokens have their user's privileges, so the default token
	// of root@pam can do anything.
	PrivSep []string
	// Roles adds roles (name → privileges) to PVE's built-in ones (Administrator,
	// PVEAdmin, PVEVMAdmin, PVEVMUser, PVEDatastoreAdmin, PVEDatastoreUser,
	// PVEAuditor, PVETemplateUser, PVEPoolAdmin, PVESDNUser, NoAccess, …).
	Roles map[string][]string
	// ACL grants roles on paths to users and tokens, as user.cfg's acl lines do.
	ACL []ACL
}

// Simulator is a running simulated Proxmox VE cluster.
type Simulator struct {
	// URL is the API base URL, https://<addr>/api2/json, as go-proxmox's NewClient
	// takes it.
	URL string
	// CACert is the PEM certificate of the simulator's own CA, which signed its TLS
	// certificate and no other simulator's.
	CACert []byte
	// TokenID and TokenSecret are the default API token.
	TokenID, TokenSecret string
	// Username and Password are the default login.
	Username, Password string

	opts    Options
	roots   *x509.CertPool
	secret  []byte // signs tickets and CSRF tokens
	server  *http.Server
	proxy   *faultproxy.Proxy
	routes  []route
	ctx     context.Context
	cancel  context.CancelFunc
	workers sync.WaitGroup
	stop    sync.Once

	mu       sync.Mutex
	users    map[string]string
	tokens   map[string]string
	acl      *aclConfig
	ha       map[int]*haResource
	nodes    []*node
	storages []*storage
	pools    map[string]string
	vms      map[int]*vm
	volumes  map[string]map[string]*volume
	// images counts, per set of volumes (storeKey), the volumes by their image name,
	// the part of the name after its last '/', so that hasDisk need not walk them all.
	images map[string]map[string]int
	tasks  []*task
	// taskIDs are the tasks by UPID, so that a task's status is read without a walk
	// of every task the cluster ever ran.
	taskIDs map[string]*task
	// flocks are the VMIDs' config lock files that someone holds; unlocked is closed
	// and replaced whenever one is released, waking those waiting.
	flocks   map[int]*flock
	unlocked chan struct{}
	// lastFork is closed once the last worker forked has tried its locks.
	lastFork chan struct{}
	// reports are pvestatd's last reports of the guests, by VMID.
	reports    map[int]map[string]any
	quorumLost bool
	failNext   map[string][]string
	pid        uint64
	requests   map[string]int
}

// Start builds the simulated cluster and serves its API.
func Start(o Options) (*Simulator, error) {
	addr := cmp.Or(o.Addr, "127.0.0.1:0")
	host, err := faultproxy.LoopbackHost(addr)
	if err != nil {
		return nil, err
	}
	// A CA of this simulator's own, as two real clusters' pve-root-ca differ.
	ca, err := simcert.NewAuthority("Proxmox Virtual Environment")
	if err != nil {
		return nil, err
	}
	cert, err := ca.ServerCertificate(host)
	if err != nil {
		return nil, err
	}
	s := &Simulator{
		opts:     o,
		CACert:   ca.PEM,
		Username: cmp.Or(o.Username, DefaultUsername), Password: cmp.Or(o.Password, DefaultPassword),
		TokenID: cmp.Or(o.TokenID, DefaultTokenID), TokenSecret: cmp.Or(o.TokenSecret, newUUID()),
		secret:   make([]byte, 32),
		pools:    map[string]string{},
		vms:      map[int]*vm{},
		volumes:  map[string]map[string]*volume{},
		images:   map[string]map[string]int{},
		taskIDs:  map[string]*task{},
		failNext: map[string][]string{},
		flocks:   map[int]*flock{},
		unlocked: make(chan struct{}),
		lastFork: closedChan(),
		reports:  map[int]map[string]any{},
		ha:       map[int]*haResource{},
		pid:      0x1a2b0,
		requests: map[string]int{},
	}
	_, _ = rand.Read(s.secret)
	s.roots = ca.Pool()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes = s.routeTable()
	if err := s.build(o); err != nil {
		return nil, err
	}
	s.startPvestatd()
	if s.acl, err = newACLConfig(o, s.tokens); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen: %w", err)
	}
	s.server = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// pveproxy speaks HTTP/1.1 only; an empty map keeps net/http from offering h2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
	}
	go func() { _ = s.server.ServeTLS(ln, "", "") }()
	s.proxy, err = faultproxy.Start(addr, ln.Addr().String())
	if err != nil {
		_ = s.server.Close()
		return nil, err
	}
	s.URL = "https://" + s.proxy.Addr() + "/api2/json"
	return s, nil
}

// unauthorizedDelay is how long a 401 answer is held back.
func (s *Simulator) unauthorizedDelay() time.Duration {
	switch d := s.opts.UnauthorizedDelay; {
	case d < 0:
		return 0
	case d == 0:
		return 3 * time.Second
	default:
		return d
	}
}

// HTTPClient returns an HTTP client that trusts the simulator's CA and nothing else,
// for go-proxmox's WithHTTPClient.
func (s *Simulator) HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}
}

// Down takes the API off the network: clients get connection refused and their open
// connections are cut. The cluster keeps its state and its tasks keep running.
func (s *Simulator) Down() { s.proxy.Down() }

// Up puts the API back on the network at the same address.
func (s *Simulator) Up() error { return s.proxy.Up() }

// Stop stops the simulator for good, ending its tasks; later calls do nothing.
func (s *Simulator) Stop() {
	s.stop.Do(func() {
		s.cancel()
		s.proxy.Close()
		_ = s.server.Close()
		s.workers.Wait()
	})
}

// SetNodeOnline takes a node off the cluster network or brings it back. Requests for
// an offline node answer 595, its guests show as unknown in /cluster/resources, and
// its running VMs keep running (a network partition, not a power cut).
func (s *Simulator) SetNodeOnline(name string, online bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	n.online = online
	return nil
}

// FailNextTask makes the next task of taskType that finishes fail with message, after
// its usual delay; each call fails one task. For qmclone the exit status is
// "clone failed: <message>", as PVE words it, and the half-made clone is removed.
func (s *Simulator) FailNextTask(taskType, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[taskType] = append(s.failNext[taskType], message)
}

// Requests counts the API requests served, by method and path template, e.g.
// "GET /nodes/{node}/tasks/{upid}/status"; unknown paths count under "<method> ?".
func (s *Simulator) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// ResetRequests sets every request count back to zero.
func (s *Simulator) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.requests)
}

// WriteSnippet puts a file on a storage's snippets directory, out of band, as an
// administrator copies one with scp: PVE's API refuses uploads of snippets, yet
// cicustom (user=local:snippets/user-data.yaml) reads them.
func (s *Simulator) WriteSnippet(nodeName, storageName, name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storage(storageName)
	if st == nil || !st.availableOn(nodeName) || s.node(nodeName) == nil {
		return fmt.Errorf("no storage %q on node %q", storageName, nodeName)
	}
	if !st.has("snippets") {
		return fmt.Errorf("storage %q does not hold snippets", storageName)
	}
	s.putVolume(nodeName, st, &volume{name: "snippets/" + name, content: "snippets", format: "snippets", size: uint64(len(data)), data: slices.Clone(data)})
	return nil
}

// Volume returns the bytes of a file volume (iso, snippets, vztmpl, import) on a
// node's view of a storage, by volume ID (local:iso/x.iso), for tests that check
// what an upload or a download stored.
func (s *Simulator) Volume(nodeName, volid string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, v := s.findVolume(nodeName, volid)
	if st == nil || v == nil {
		return nil, false
	}
	return slices.Clone(v.data), true
}

// newUUID is a random RFC 4122 version 4 UUID, the form of PVE's token secrets and
// SMBIOS UUIDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

var errStopped = errors.New("interrupted by signal")
