// Package vspheresim runs vcsim, govmomi's vCenter simulator, the way banlieue's tests,
// 'banlieue dev' and 'banlieue sim vsphere' use it: in process, over TLS on loopback,
// behind a fault proxy that can take it off the network, with VM templates to clone
// from and simulated guests that report an IPv4 address soon after power-on, as VMware
// Tools do.
package vspheresim

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"

	"github.com/banlieue/banlieue/sim/faultproxy"
)

// Default credentials of the simulator.
const (
	DefaultUsername = "administrator@vsphere.local"
	DefaultPassword = "banlieue-dev"
)

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
	// Templates are the VM templates to create; ["ubuntu-22.04"] when nil.
	Templates []string
	// GuestAddressDelay is how long after power-on a simulated guest reports its
	// address; 0 means at once, a negative value never.
	GuestAddressDelay time.Duration
	// Username and Password are the accepted credentials; the defaults when empty.
	Username, Password string
}

// Simulator is a running simulated vCenter.
type Simulator struct {
	// URL is the SDK endpoint, https://<addr>/sdk, without credentials.
	URL *url.URL
	// Username and Password are the credentials it accepts.
	Username, Password string
	// CACert is the PEM certificate that its TLS certificate verifies against.
	CACert []byte

	model  *simulator.Model
	server *simulator.Server
	proxy  *faultproxy.Proxy
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Start creates the simulated inventory and serves it.
func Start(o Options) (*Simulator, error) {
	m := simulator.VPX()
	m.Cluster = orDefault(o.Clusters, 2)
	m.ClusterHost = orDefault(o.HostsPerCluster, 2)
	m.Host = 0
	m.Datastore = orDefault(o.Datastores, 1)
	m.Machine = 1
	if err := m.Create(); err != nil {
		return nil, fmt.Errorf("failed to create the simulated inventory: %w", err)
	}
	m.Service.TLS = new(tls.Config)
	user, password := orDefaultString(o.Username, DefaultUsername), orDefaultString(o.Password, DefaultPassword)
	m.Service.Listen = &url.URL{Host: "127.0.0.1:0", User: url.UserPassword(user, password)}
	server := m.Service.NewServer()
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	proxy, err := faultproxy.Start(addr, server.URL.Host)
	if err != nil {
		server.Close()
		m.Remove()
		return nil, err
	}
	s := &Simulator{
		URL:      &url.URL{Scheme: "https", Host: proxy.Addr(), Path: "/sdk"},
		Username: user, Password: password,
		CACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}),
		model:  m, server: server, proxy: proxy,
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	c, err := s.Client(ctx)
	if err == nil {
		err = s.makeTemplates(ctx, c, o.Templates)
	}
	if err == nil && o.GuestAddressDelay >= 0 {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			runGuests(ctx, c, o.GuestAddressDelay)
		}()
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orDefaultString(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// Client logs in to the simulator through its public address, verifying its
// certificate, and returns a client of its own (a session of its own, too).
func (s *Simulator) Client(ctx context.Context) (*govmomi.Client, error) {
	u := *s.URL
	u.User = url.UserPassword(s.Username, s.Password)
	sc := soap.NewClient(&u, false)
	if err := sc.SetRootCAs(""); err != nil {
		return nil, err
	}
	pool, err := certPool(s.CACert)
	if err != nil {
		return nil, err
	}
	sc.DefaultTransport().TLSClientConfig.RootCAs = pool
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("failed to reach the simulator: %w", err)
	}
	c := &govmomi.Client{Client: vc, SessionManager: session.NewManager(vc)}
	if err := c.Login(ctx, u.User); err != nil {
		return nil, fmt.Errorf("failed to log in to the simulator: %w", err)
	}
	return c, nil
}

// Down takes the simulator off the network: clients get connection refused.
func (s *Simulator) Down() { s.proxy.Down() }

// Up puts the simulator back on the network at the same address.
func (s *Simulator) Up() error { return s.proxy.Up() }

// Stop stops the simulator for good.
func (s *Simulator) Stop() {
	s.cancel()
	s.proxy.Close()
	s.done.Wait()
	s.server.Close()
	s.model.Remove()
}

// makeTemplates turns VMs of the model into templates with the given names.
func (s *Simulator) makeTemplates(ctx context.Context, c *govmomi.Client, names []string) error {
	if names == nil {
		names = []string{"ubuntu-22.04"}
	}
	if len(names) == 0 {
		return nil
	}
	vms, err := find.NewFinder(c.Client, true).VirtualMachineList(ctx, "/*/vm/*")
	if err != nil {
		return fmt.Errorf("failed to list the simulated VMs: %w", err)
	}
	if len(vms) < len(names) {
		return fmt.Errorf("the simulator has %d VMs, fewer than the %d templates asked for", len(vms), len(names))
	}
	for i, name := range names {
		if err := makeTemplate(ctx, vms[i], name); err != nil {
			return err
		}
	}
	return nil
}

func makeTemplate(ctx context.Context, vm *object.VirtualMachine, name string) error {
	if state, err := vm.PowerState(ctx); err == nil && state == "poweredOn" {
		t, err := vm.PowerOff(ctx)
		if err == nil {
			err = t.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("failed to power off %s: %w", vm.Name(), err)
		}
	}
	t, err := vm.Rename(ctx, name)
	if err == nil {
		err = t.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("failed to rename %s to %s: %w", vm.Name(), name, err)
	}
	if err := vm.MarkAsTemplate(ctx); err != nil {
		return fmt.Errorf("failed to mark %s as a template: %w", name, err)
	}
	return nil
}

var errNoCertificate = errors.New("no certificate in the PEM data")
