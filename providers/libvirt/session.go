package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/digitalocean/go-libvirt"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Keys of the Provider's spec.parameters this driver reads.
const (
	// ParamPool is the storage pool of disks whose storage class names none; "default"
	// when unset.
	ParamPool = "pool"
	// ParamImagePool is the storage pool images are imported into; ParamPool's when unset.
	ParamImagePool = "imagePool"
	// ParamNetwork is the libvirt network of interfaces whose network class names
	// neither a network nor a bridge; "default" when unset.
	ParamNetwork = "network"
	// ParamFailureDomain names the host's failure domain; its host name when unset.
	ParamFailureDomain = "failureDomain"
	// ParamDomainType is the hypervisor domains run on: kvm or qemu (TCG, emulated).
	// The fastest the host offers when unset; qemu is for hosts whose KVM cannot run
	// the guests, e.g. some nested setups.
	ParamDomainType = "domainType"
)

// session is one connection to a libvirtd: the providersdk.Client of a Provider.
type session struct {
	driver *Driver
	ep     *endpoint
	dialer *dialer
	// secretRef is "<namespace>/<name>" of the credentials Secret, for messages.
	secretRef string

	params         map[string]string
	storageClasses []classTarget
	networkClasses []classTarget
	features       []string
	labels         map[string]string

	mu   sync.Mutex
	conn *libvirt.Libvirt
	// raw are the network connections under conn and the imports' connections:
	// go-libvirt stops using a connection whose reads fail without closing it, so the
	// session closes them itself.
	raw   map[*libvirt.Libvirt]*rawConn
	rawMu sync.Mutex
	host  *hostInfo

	imports *providersdk.Imports
}

var _ providersdk.Client = (*session)(nil)

// classTarget is a storage or network class and its backend objects.
type classTarget struct {
	name   string
	target map[string]string
}

// connect builds the session for info and opens its connection.
func (d *Driver) connect(ctx context.Context, info providersdk.ProviderInfo) (*session, error) {
	p := info.Provider
	if p == nil {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "the Provider is missing")
	}
	ep, err := parseEndpoint(p.Spec.Connection.Endpoint)
	if err != nil {
		return nil, err
	}
	secretRef := info.SecretRef()
	dl, err := newDialer(ep, info, d.dialTimeout, secretRef)
	if err != nil {
		return nil, err
	}
	s := &session{
		driver: d, ep: ep, dialer: dl, secretRef: secretRef,
		params:   map[string]string{},
		features: p.Spec.Capabilities.Features,
		labels:   map[string]string{},
		raw:      map[*libvirt.Libvirt]*rawConn{},
	}
	for k, v := range p.Spec.Parameters {
		s.params[k] = v
	}
	for k, v := range p.Labels {
		s.labels[k] = v
	}
	for _, c := range p.Spec.Capabilities.StorageClasses {
		s.storageClasses = append(s.storageClasses, classTarget{name: c.Name, target: c.Target})
	}
	for _, c := range p.Spec.Capabilities.NetworkClasses {
		s.networkClasses = append(s.networkClasses, classTarget{name: c.Name, target: c.Target})
	}
	if _, err := s.client(); err != nil {
		return nil, err
	}
	s.imports = providersdk.NewImports(d.now)
	ctrl.LoggerFrom(ctx).V(1).Info("Connected to libvirtd", "endpoint", ep.safe)
	return s, nil
}

// dial opens a new connection to the daemon's driver; close closes it.
func (s *session) dial() (*libvirt.Libvirt, error) {
	rc := &rawConn{dialer: s.dialer}
	l := libvirt.NewWithDialer(rc)
	if err := l.ConnectToURI(libvirt.ConnectURI(s.ep.driverURI)); err != nil {
		rc.close()
		return nil, s.fail("connect to libvirt at "+s.ep.safe, err)
	}
	s.rawMu.Lock()
	s.raw[l] = rc
	s.rawMu.Unlock()
	return l, nil
}

// close ends a connection dial made: politely, then by closing its network connection.
func (s *session) close(l *libvirt.Libvirt) {
	if l.IsConnected() {
		_ = l.Disconnect()
	}
	s.rawMu.Lock()
	rc := s.raw[l]
	delete(s.raw, l)
	s.rawMu.Unlock()
	if rc != nil {
		rc.close()
	}
}

// rawConn is a dialer that remembers the connection it made.
type rawConn struct {
	dialer *dialer
	mu     sync.Mutex
	conn   net.Conn
}

// Dial dials and remembers the connection.
func (r *rawConn) Dial() (net.Conn, error) {
	c, err := r.dialer.Dial()
	r.mu.Lock()
	r.conn = c
	r.mu.Unlock()
	return c, err
}

// close closes the remembered connection.
func (r *rawConn) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// client returns the session's connection, dialling again when it dropped (libvirtd
// restarted, the network blinked).
func (s *session) client() (*libvirt.Libvirt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.IsConnected() {
		return s.conn, nil
	}
	if old := s.conn; old != nil {
		s.conn = nil
		go s.close(old)
	}
	l, err := s.dial()
	if err != nil {
		return nil, err
	}
	s.conn = l
	return l, nil
}

// drop forgets l, closing it, so the next call dials afresh.
func (s *session) drop(l *libvirt.Libvirt) {
	s.mu.Lock()
	if s.conn == l {
		s.conn = nil
	}
	s.mu.Unlock()
	go s.close(l)
}

// do runs f, doing what, on the session's connection and returns its error typed by
// fail; it counts the work in providersdk.BackendCalls as operation. go-libvirt calls
// take no context, so when ctx ends first the connection is closed, which ends the
// call, and the backend is reported unreachable.
func (s *session) do(ctx context.Context, operation, what string, f func(l *libvirt.Libvirt) error) error {
	l, err := s.client()
	if err != nil {
		providersdk.CountBackendCall(ProviderClass, operation, err)
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f(l) }()
	select {
	case err := <-done:
		providersdk.CountBackendCall(ProviderClass, operation, err)
		err = s.fail(what, err)
		if providersdk.IsUnreachable(err) {
			s.drop(l)
		}
		return err
	case <-ctx.Done():
		providersdk.CountBackendCall(ProviderClass, operation, ctx.Err())
		s.drop(l)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return providersdk.Unreachable(fmt.Errorf("libvirt at %s did not answer in time to %s", s.ep.safe, what))
		}
		return fmt.Errorf("failed to %s: %w", what, ctx.Err())
	}
}

// Disconnect stops the session's imports and closes its connection.
func (s *session) Disconnect(context.Context) error {
	s.imports.Stop()
	s.mu.Lock()
	s.conn = nil
	s.mu.Unlock()
	s.rawMu.Lock()
	var conns []*libvirt.Libvirt
	for l := range s.raw {
		conns = append(conns, l)
	}
	s.rawMu.Unlock()
	for _, l := range conns {
		s.close(l)
	}
	return nil
}
