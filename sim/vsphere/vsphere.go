package vspheresim

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"

	"github.com/banlieue/banlieue/sim/faultproxy"
	"github.com/banlieue/banlieue/sim/simcert"
)

// Default credentials of the simulator.
const (
	// DefaultUsername is the user the simulator accepts when Options.Username is empty.
	DefaultUsername = "administrator@vsphere.local"
	// DefaultPassword is the password the simulator accepts when Options.Password is
	// empty.
	DefaultPassword = "banlieue-dev" //nolint:gosec // the simulator's fixed, documented test password
)

// setUpTimeout bounds the logging in and template making of Start.
const setUpTimeout = time.Minute

// Options shape the simulated vCenter.
type Options struct {
	// Addr is where the simulator listens, host:port; "127.0.0.1:0" when empty.
	Addr string
	// Clusters is the number of compute clusters in the one datacenter, DC0; 2 when zero.
	Clusters int
	// HostsPerCluster is the number of ESXi hosts per cluster; 2 when zero.
	HostsPerCluster int
	// Datastores is the number of datastores, LocalDS_0…; 1 when zero.
	Datastores int
	// Templates are the names of the VM templates to create in the first cluster;
	// [DefaultTemplate] when nil, none when empty.
	Templates []string
	// VMs are the names of ordinary VMs, shaped as the templates and powered on, to
	// create beside them: VMs someone made by hand, for banlieue to adopt.
	VMs []string
	// GuestAddressDelay is how long after power-on a simulated guest reports its
	// address; 0 means at once, a negative value never (the caller sets addresses with
	// SetGuestAddress).
	GuestAddressDelay time.Duration
	// Username and Password are the accepted credentials; the defaults when empty.
	Username, Password string
	// Model, when set, changes govmomi's VPX model after the fields above shaped it and
	// before it is created: more datacenters, standalone hosts, VMs that are not
	// templates.
	Model func(*simulator.Model)
}

// Simulator is a running simulated vCenter.
type Simulator struct {
	// URL is the SDK endpoint, https://<addr>/sdk, without credentials.
	URL *url.URL
	// Username and Password are the credentials it accepts.
	Username, Password string
	// CACert is the PEM certificate of the simulator's own CA, which signed its TLS
	// certificate and no other simulator's.
	CACert []byte
	// TemplateRefs are the templates' managed object IDs (vm-42…) by name.
	TemplateRefs map[string]string
	// VMRefs are the managed object IDs of Options.VMs by name.
	VMRefs map[string]string

	model  *simulator.Model
	server *simulator.Server
	proxy  *faultproxy.Proxy
	roots  *x509.CertPool
	own    *govmomi.Client
	ownKey string
	cancel context.CancelFunc
	// done counts the guest agent and its pending reports.
	done sync.WaitGroup
	stop sync.Once
}

// Start creates the simulated inventory and serves it.
func Start(o Options) (*Simulator, error) {
	addr := cmp.Or(o.Addr, "127.0.0.1:0")
	host, err := faultproxy.LoopbackHost(addr)
	if err != nil {
		return nil, err
	}
	ca, err := simcert.NewAuthority("vspheresim CA")
	if err != nil {
		return nil, err
	}
	cert, err := ca.ServerCertificate(host)
	if err != nil {
		return nil, err
	}
	m := simulator.VPX()
	m.Cluster = cmp.Or(o.Clusters, 2)
	m.ClusterHost = cmp.Or(o.HostsPerCluster, 2)
	m.Datastore = cmp.Or(o.Datastores, 1)
	// Clusters only and no VMs but the templates, as a fresh vCenter is.
	m.Host, m.Machine = 0, 0
	if o.Model != nil {
		o.Model(m)
	}
	if err := m.Create(); err != nil {
		return nil, fmt.Errorf("failed to create the simulated inventory: %w", err)
	}
	m.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	user, password := cmp.Or(o.Username, DefaultUsername), cmp.Or(o.Password, DefaultPassword)
	m.Service.Listen = &url.URL{Host: "127.0.0.1:0", User: url.UserPassword(user, password)}
	server := m.Service.NewServer()
	proxy, err := faultproxy.Start(addr, server.URL.Host)
	if err != nil {
		server.Close()
		m.Remove()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Simulator{
		URL:      &url.URL{Scheme: "https", Host: proxy.Addr(), Path: "/sdk"},
		Username: user, Password: password,
		CACert: ca.PEM,
		model:  m, server: server, proxy: proxy, roots: ca.Pool(), cancel: cancel,
	}
	if err := s.setUp(ctx, o); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// setUp opens the simulator's own session, makes the templates with it and starts the
// guest agent on it.
func (s *Simulator) setUp(ctx context.Context, o Options) error {
	setUpCtx, cancel := context.WithTimeout(ctx, setUpTimeout)
	defer cancel()
	own, err := s.Client(setUpCtx)
	if err != nil {
		return err
	}
	us, err := own.SessionManager.UserSession(setUpCtx)
	if err != nil {
		return fmt.Errorf("failed to read the simulator's own session: %w", err)
	}
	if us == nil {
		return errors.New("failed to read the simulator's own session: no session")
	}
	s.own, s.ownKey = own, us.Key
	templates := o.Templates
	if templates == nil {
		templates = []string{DefaultTemplate}
	}
	if s.TemplateRefs, err = makeTemplates(setUpCtx, own, templates); err != nil {
		return err
	}
	if s.VMRefs, err = makeVMs(setUpCtx, own, o.VMs, false); err != nil {
		return err
	}
	if o.GuestAddressDelay >= 0 {
		g := newGuests(own, o.GuestAddressDelay, &s.done)
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			g.run(ctx)
		}()
	}
	return nil
}

// Client logs in to the simulator through its public address, verifying its
// certificate against CACert, and returns a client of its own (a session of its own,
// too, which Sessions counts).
func (s *Simulator) Client(ctx context.Context) (*govmomi.Client, error) {
	u := *s.URL
	sc := soap.NewClient(&u, false)
	sc.DefaultTransport().TLSClientConfig.RootCAs = s.roots
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("failed to reach the simulator: %w", err)
	}
	c := &govmomi.Client{Client: vc, SessionManager: session.NewManager(vc)}
	if err := c.Login(ctx, url.UserPassword(s.Username, s.Password)); err != nil {
		return nil, fmt.Errorf("failed to log in to the simulator: %w", err)
	}
	return c, nil
}

// OwnClient is the simulator's own session, which made the templates and plays the
// guests. It is for looking at and changing the inventory behind its clients' backs;
// Sessions does not count it and TerminateSessions spares it. Do not log it out.
func (s *Simulator) OwnClient() *govmomi.Client { return s.own }

// Down takes the simulator off the network: clients get connection refused and their
// open connections are cut. The simulated vCenter keeps its state.
func (s *Simulator) Down() { s.proxy.Down() }

// Up puts the simulator back on the network at the same address.
func (s *Simulator) Up() error {
	if err := s.proxy.Up(); err != nil {
		return err
	}
	// Down cut the own session's connections; dial afresh rather than write to them.
	s.own.Client.CloseIdleConnections()
	return nil
}

// Restart puts the simulator back on the network, as Up does, and ends every session
// but its own, as restarting a real vCenter does: clients must log in again.
func (s *Simulator) Restart(ctx context.Context) error {
	if err := s.Up(); err != nil {
		return err
	}
	return s.TerminateSessions(ctx)
}

// Stop stops the simulator for good; later calls do nothing.
func (s *Simulator) Stop() {
	s.stop.Do(func() {
		s.cancel()
		s.proxy.Close()
		s.done.Wait()
		s.server.Close()
		s.model.Remove()
	})
}
