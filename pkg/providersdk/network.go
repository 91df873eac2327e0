package providersdk

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
)

// IdleConnsPerBackend is how many idle connections a driver's HTTP transport should
// keep to one backend: more than a provider's machine workers (WithWorkers), so that
// their concurrent calls reuse connections. net/http keeps 2, and past that every call
// made beside two others closed its connection after use and the next one made a new
// TLS connection: a handshake's CPU on both sides, the backend's included.
const IdleConnsPerBackend = 32

// Endpoint names a backend in the messages of network and TLS problems, which every
// driver reports alike.
type Endpoint struct {
	// Kind is what the backend is, e.g. "vCenter" or "Proxmox VE".
	Kind string
	// Host is the endpoint's host (and port).
	Host string
	// CAHint says where this kind of backend's CA certificate is found, e.g.
	// "/etc/pve/pve-root-ca.pem on a node"; "" for no hint.
	CAHint string
	// RefusedHint is appended to the advice for a refused connection, e.g.
	// " and that vCenter is running".
	RefusedHint string
}

// Problem returns a message a person can act on when err means the backend could not be
// reached or its certificate not trusted, and false for any other error.
func (e Endpoint) Problem(err error) (string, bool) {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		dnsErr    *net.DNSError
		netErr    net.Error
		urlErr    *url.Error
	)
	switch {
	case errors.As(err, &unknownCA):
		hint := ""
		if e.CAHint != "" {
			hint = " (" + e.CAHint + ")"
		}
		return fmt.Sprintf("%s %s presents a TLS certificate signed by an unknown authority; "+
			"set spec.connection.caBundle to the PEM certificate of the CA that signed it%s, "+
			"or spec.connection.insecureSkipTLSVerify for test backends only", e.Kind, e.Host, hint), true
	case errors.As(err, &hostname):
		return fmt.Sprintf("the TLS certificate of %s is not valid for %s; "+
			"use a host name the certificate names in spec.connection.endpoint", e.Kind, e.Host), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("%s %s presents an invalid TLS certificate: %s", e.Kind, e.Host, invalid.Error()), true
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve %s host %q; check spec.connection.endpoint", e.Kind, dnsErr.Name), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("%s %s refused the connection; check spec.connection.endpoint%s", e.Kind, e.Host, e.RefusedHint), true
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("%s %s did not answer in time; check the network path to it and its load", e.Kind, e.Host), true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.EPIPE):
		return fmt.Sprintf("%s %s closed the connection; it may be restarting", e.Kind, e.Host), true
	case errors.As(err, &urlErr), errors.As(err, &netErr):
		return fmt.Sprintf("cannot reach %s %s: %s; check spec.connection.endpoint", e.Kind, e.Host, RootCause(err)), true
	}
	return "", false
}

// RootCause returns the innermost error's text: the part of a url.Error that does not
// repeat the request.
func RootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// Explained is an error whose text, for a person, explains cause, which it keeps for
// errors.Is and errors.As.
func Explained(message string, cause error) error { return &explained{msg: message, cause: cause} }

type explained struct {
	msg   string
	cause error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.cause }
