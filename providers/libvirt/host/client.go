package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Config is how to reach one libvirtd.
type Config struct {
	// Endpoint is the libvirt URI, e.g. qemu+ssh://user@host/system.
	Endpoint string
	// Credentials is the credentials Secret's data (SSHPrivateKeyKey, KnownHostsKey,
	// TLSCertKey, TLSKeyKey, CACertKey); never logged nor put in an error.
	Credentials map[string][]byte
	// SecretRef is "<namespace>/<name>" of the credentials Secret, for messages.
	SecretRef string
	// CABundle is the PEM CA bundle that verifies libvirtd's TLS certificate; the
	// Secret's CACertKey, else the system roots, when empty.
	CABundle []byte
	// InsecureSkipTLSVerify accepts any certificate libvirtd presents.
	InsecureSkipTLSVerify bool
	// DialTimeout bounds a connection to libvirtd, SSH and TLS handshakes included.
	DialTimeout time.Duration
	// Class labels the calls counted in providersdk.BackendCalls.
	Class string
}

// Client is one connection to a libvirtd, dialled again when it dropped (libvirtd
// restarted, the network blinked). It is safe for concurrent use.
type Client struct {
	ep     *endpoint
	dialer *dialer
	// secretRef is "<namespace>/<name>" of the credentials Secret, for messages.
	secretRef string
	class     string

	mu   sync.Mutex
	conn *libvirt.Libvirt
	// raw are the network connections under conn and the imports' connections:
	// go-libvirt stops using a connection whose reads fail without closing it, so the
	// client closes them itself.
	raw   map[*libvirt.Libvirt]*rawConn
	rawMu sync.Mutex
	// closed is set by Close, under rawMu: a closed client dials no more.
	closed bool
}

// Connect parses cfg, prepares its credentials and opens the connection. It fails with
// providersdk.Unreachable when libvirtd cannot be reached or its host not verified,
// providersdk.Unauthorized when it rejects the credentials, and providersdk.Permanent
// when the endpoint or the credentials are incomplete.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	ep, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	dl, err := newDialer(ep, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{ep: ep, dialer: dl, secretRef: cfg.SecretRef, class: cfg.Class, raw: map[*libvirt.Libvirt]*rawConn{}}
	if _, err := c.client(); err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Connected to libvirtd", "endpoint", ep.safe)
	return c, nil
}

// URI is the endpoint without user information, for messages.
func (c *Client) URI() string { return c.ep.safe }

// RemoteHost is the remote host's name of an ssh or tls endpoint; "" for a local socket.
func (c *Client) RemoteHost() string { return c.ep.host }

// dial opens a new connection to the daemon's driver; close closes it. Once the client
// is closed it fails with providersdk.ErrSessionClosed: a connection dialled then would
// be made with the credentials the Provider replaced, and nothing would close it.
func (c *Client) dial() (*libvirt.Libvirt, error) {
	if c.isClosed() {
		return nil, providersdk.ErrSessionClosed
	}
	rc := &rawConn{dialer: c.dialer}
	l := libvirt.NewWithDialer(rc)
	if err := l.ConnectToURI(libvirt.ConnectURI(c.ep.driverURI)); err != nil {
		rc.close()
		return nil, c.fail("connect to libvirt at "+c.ep.safe, err)
	}
	c.rawMu.Lock()
	closed := c.closed
	if !closed {
		c.raw[l] = rc
	}
	c.rawMu.Unlock()
	if closed { // Close ran while this dialled
		_ = l.Disconnect()
		rc.close()
		return nil, providersdk.ErrSessionClosed
	}
	return l, nil
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.rawMu.Lock()
	defer c.rawMu.Unlock()
	return c.closed
}

// close ends a connection dial made: politely, then by closing its network connection.
func (c *Client) close(l *libvirt.Libvirt) {
	if l.IsConnected() {
		_ = l.Disconnect()
	}
	c.rawMu.Lock()
	rc := c.raw[l]
	delete(c.raw, l)
	c.rawMu.Unlock()
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

// client returns the connection, dialling again when it dropped.
func (c *Client) client() (*libvirt.Libvirt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && c.conn.IsConnected() {
		return c.conn, nil
	}
	if old := c.conn; old != nil {
		c.conn = nil
		go c.close(old)
	}
	l, err := c.dial()
	if err != nil {
		return nil, err
	}
	c.conn = l
	return l, nil
}

// drop forgets l, closing it, so the next call dials afresh.
func (c *Client) drop(l *libvirt.Libvirt) {
	c.mu.Lock()
	if c.conn == l {
		c.conn = nil
	}
	c.mu.Unlock()
	go c.close(l)
}

// do runs f, doing what, on the connection and returns its error, as call does.
func (c *Client) do(ctx context.Context, operation, what string, f func(l *libvirt.Libvirt) error) error {
	_, err := call(ctx, c, operation, what, func(l *libvirt.Libvirt) (struct{}, error) { return struct{}{}, f(l) })
	return err
}

// result is what a call's f returned.
type result[T any] struct {
	value T
	err   error
}

// call runs f, doing what, on c's connection and returns its result, with its error
// typed by fail; it counts the work in providersdk.BackendCalls as operation. go-libvirt
// calls take no context, so when ctx ends first the connection is closed, which ends
// the call, and the backend is reported unreachable. f's result comes back on a
// channel, never through variables f shares with the caller: a call given up on goes
// on until the close ends it, and must write nothing the caller reads.
func call[T any](ctx context.Context, c *Client, operation, what string, f func(l *libvirt.Libvirt) (T, error)) (T, error) {
	var zero T
	l, err := c.client()
	if err != nil {
		providersdk.CountBackendCall(c.class, operation, err)
		return zero, err
	}
	done := make(chan result[T], 1)
	go func() {
		v, err := f(l)
		done <- result[T]{v, err}
	}()
	select {
	case r := <-done:
		providersdk.CountBackendCall(c.class, operation, r.err)
		if r.err != nil && c.isClosed() {
			// Close ended the call's connection: libvirtd is not the cause.
			return r.value, fmt.Errorf("failed to %s: %w", what, providersdk.ErrSessionClosed)
		}
		err := c.fail(what, r.err)
		if providersdk.IsUnreachable(err) {
			c.drop(l)
		}
		return r.value, err
	case <-ctx.Done():
		providersdk.CountBackendCall(c.class, operation, ctx.Err())
		c.drop(l)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, providersdk.Unreachable(fmt.Errorf("libvirt at %s did not answer in time to %s", c.ep.safe, what))
		}
		return zero, fmt.Errorf("failed to %s: %w", what, ctx.Err())
	}
}

// Close closes the connection and every import's.
func (c *Client) Close() {
	c.mu.Lock()
	c.conn = nil
	c.mu.Unlock()
	c.rawMu.Lock()
	c.closed = true
	conns := make([]*libvirt.Libvirt, 0, len(c.raw))
	for l := range c.raw {
		conns = append(conns, l)
	}
	c.rawMu.Unlock()
	for _, l := range conns {
		c.close(l)
	}
}
