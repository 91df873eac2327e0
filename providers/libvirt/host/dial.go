package host

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Keys of the credentials Secret.
const (
	// SSHPrivateKeyKey holds the PEM private key for qemu+ssh (the key of Kubernetes'
	// kubernetes.io/ssh-auth Secrets).
	SSHPrivateKeyKey = "ssh-privatekey"
	// KnownHostsKey holds the known_hosts lines that verify the SSH host key; required.
	KnownHostsKey = "known_hosts"
	// TLSCertKey holds the PEM client certificate for qemu+tls.
	TLSCertKey = "tls.crt"
	// TLSKeyKey holds the PEM client key for qemu+tls.
	TLSKeyKey = "tls.key"
	// CACertKey holds the PEM CA that signed libvirtd's certificate, when
	// spec.connection.caBundle does not give one.
	CACertKey = "ca.crt"
)

// defaultSocket is libvirtd's read-write socket on a Debian host.
const defaultSocket = "/var/run/libvirt/libvirt-sock"

// transports of a libvirt URI this driver speaks.
const (
	transportUnix = "unix"
	transportSSH  = "ssh"
	transportTLS  = "tls"
)

// endpoint is a parsed libvirt URI.
type endpoint struct {
	transport string
	// driverURI is what the daemon is asked to open, e.g. qemu:///system.
	driverURI string
	// host is the remote host's name; "" for a local socket.
	host string
	// addr is host:port for ssh and tls.
	addr string
	// user is the SSH user.
	user string
	// socket is the daemon's socket path: local, or on the remote host for ssh.
	socket string
	// safe is the URI without user information, for messages.
	safe string
}

// parseEndpoint reads a libvirt URI: qemu:///system, test:///default,
// qemu+unix:///system?socket=/path, qemu+ssh://user@host[:port]/system[?socket=/path]
// or qemu+tls://host[:port]/system. Unencrypted qemu+tcp is refused.
func parseEndpoint(raw string) (*endpoint, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint is empty")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil, providersdk.Permanent(infrav1.MachineFailedReason,
			"spec.connection.endpoint %q is not a libvirt URI such as qemu+ssh://user@host/system", raw)
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	e := &endpoint{socket: u.Query().Get("socket"), user: u.User.Username()}
	safe := *u
	safe.User = nil
	e.safe = safe.String()
	e.driverURI = driver + "://" + u.Path
	switch transport {
	case "", transportUnix:
		if u.Host != "" && transport == "" {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason,
				"spec.connection.endpoint %q names a host but no transport; use qemu+ssh:// or qemu+tls://", e.safe)
		}
		e.transport = transportUnix
	case transportSSH, transportTLS:
		e.transport = transport
		e.host = u.Hostname()
		if e.host == "" {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason, "spec.connection.endpoint %q names no host", e.safe)
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{transportSSH: "22", transportTLS: "16514"}[transport]
		}
		e.addr = net.JoinHostPort(e.host, port)
		if transport == transportSSH && e.user == "" {
			e.user = "root"
		}
	default:
		return nil, providersdk.Permanent(infrav1.MachineFailedReason,
			"spec.connection.endpoint %q uses transport %q; use unix, ssh or tls (tcp is unencrypted)", e.safe, transport)
	}
	if e.socket == "" {
		e.socket = defaultSocket
	}
	return e, nil
}

// dialer implements go-libvirt's socket.Dialer for one endpoint.
type dialer struct {
	ep      *endpoint
	timeout time.Duration
	ssh     *ssh.ClientConfig
	tls     *tls.Config
}

// newDialer prepares the dialer of ep with cfg's credentials. Errors name the missing
// or bad key, never a value.
func newDialer(ep *endpoint, cfg Config) (*dialer, error) {
	d := &dialer{ep: ep, timeout: cfg.DialTimeout}
	creds, secretRef := cfg.Credentials, cfg.SecretRef
	switch ep.transport {
	case transportSSH:
		for _, k := range []string{SSHPrivateKeyKey, KnownHostsKey} {
			if len(creds[k]) == 0 {
				return nil, providersdk.Permanent(infrav1.MachineFailedReason, "credentials Secret %s has no %q key, which qemu+ssh needs", secretRef, k)
			}
		}
		signer, err := ssh.ParsePrivateKey(creds[SSHPrivateKeyKey])
		if err != nil {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason, "credentials Secret %s: %q is not an unencrypted PEM private key", secretRef, SSHPrivateKeyKey)
		}
		hostKeys, err := hostKeyCallback(creds[KnownHostsKey])
		if err != nil {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason, "credentials Secret %s: %q is not in known_hosts format", secretRef, KnownHostsKey)
		}
		d.ssh = &ssh.ClientConfig{User: ep.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hostKeys, Timeout: cfg.DialTimeout}
	case transportTLS:
		if len(creds[TLSCertKey]) == 0 || len(creds[TLSKeyKey]) == 0 {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason, "credentials Secret %s needs %q and %q for qemu+tls", secretRef, TLSCertKey, TLSKeyKey)
		}
		cert, err := tls.X509KeyPair(creds[TLSCertKey], creds[TLSKeyKey])
		if err != nil {
			return nil, providersdk.Permanent(infrav1.MachineFailedReason, "credentials Secret %s: %q and %q are not a matching PEM certificate and key", secretRef, TLSCertKey, TLSKeyKey)
		}
		d.tls = &tls.Config{Certificates: []tls.Certificate{cert}, ServerName: ep.host, MinVersion: tls.VersionTLS12}
		bundle := cfg.CABundle
		if len(bundle) == 0 && len(creds[CACertKey]) > 0 {
			bundle = creds[CACertKey]
		}
		// The SDK reads the bundle, so that a bad one reads as on every backend.
		pool, err := providersdk.ProviderInfo{CABundle: bundle}.RootCAs()
		if err != nil {
			return nil, err
		}
		d.tls.RootCAs = pool
		d.tls.InsecureSkipVerify = cfg.InsecureSkipTLSVerify
	}
	return d, nil
}

// hostKeyCallback verifies SSH host keys against known_hosts lines (hashed host names,
// ports and @revoked markers included), through x/crypto's knownhosts, which reads files:
// the lines go through a temporary one, removed at once.
func hostKeyCallback(data []byte) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "banlieue-known-hosts-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, err
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if err := cb(hostname, remote, key); err != nil {
			return &hostKeyError{host: hostname, cause: err}
		}
		return nil
	}, nil
}

// hostKeyError says the SSH server's key is not in known_hosts, or not the one there.
type hostKeyError struct {
	host  string
	cause error
}

// Error names the host.
func (e *hostKeyError) Error() string {
	var ke *knownhosts.KeyError
	if errors.As(e.cause, &ke) && len(ke.Want) > 0 {
		return fmt.Sprintf("the SSH host key of %s differs from the one in the credentials Secret's %q", e.host, KnownHostsKey)
	}
	return fmt.Sprintf("the SSH host key of %s is not in the credentials Secret's %q", e.host, KnownHostsKey)
}

// Unwrap returns knownhosts' error.
func (e *hostKeyError) Unwrap() error { return e.cause }

// Dial connects to libvirtd.
func (d *dialer) Dial() (net.Conn, error) {
	switch d.ep.transport {
	case transportSSH:
		client, err := ssh.Dial("tcp", d.ep.addr, d.ssh)
		if err != nil {
			return nil, err
		}
		c, err := client.Dial("unix", d.ep.socket)
		if err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("failed to reach libvirtd's socket %s over SSH: %w", d.ep.socket, err)
		}
		return &sshConn{Conn: c, client: client}, nil
	case transportTLS:
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: d.timeout}, "tcp", d.ep.addr, d.tls)
		if err != nil {
			return nil, err
		}
		// After the handshake libvirtd checks the client's certificate and says yes with
		// one byte, 1, before any RPC; on no it closes the connection.
		_ = c.SetReadDeadline(time.Now().Add(d.timeout))
		buf := make([]byte, 1)
		if n, err := c.Read(buf); err != nil || n != 1 || buf[0] != 1 {
			_ = c.Close()
			return nil, &certRefusedError{addr: d.ep.addr}
		}
		_ = c.SetReadDeadline(time.Time{})
		return c, nil
	}
	return net.DialTimeout("unix", d.ep.socket, d.timeout)
}

// certRefusedError says libvirtd did not accept the client certificate.
type certRefusedError struct{ addr string }

// Error names the daemon.
func (e *certRefusedError) Error() string {
	return fmt.Sprintf("libvirtd at %s refused the client certificate in %q (not signed by a CA it trusts, or its name not allowed)", e.addr, TLSCertKey)
}

// sshConn is a channel to libvirtd's socket that closes its SSH client with it.
type sshConn struct {
	net.Conn
	client *ssh.Client
}

// Close closes the channel and the SSH connection.
func (c *sshConn) Close() error {
	err := c.Conn.Close()
	_ = c.client.Close()
	return err
}
