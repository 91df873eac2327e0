package proxmox

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/luthermonson/go-proxmox"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// fail turns the error of a PVE call doing what into the SDK's typed errors: connection
// and certificate problems become Unreachable, rejected credentials Unauthorized, a
// missing privilege Permanent; the rest keeps PVE's message and stays an *APIError
// underneath, for callers that branch on it.
func (s *session) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if typed(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if msg, ok := s.unreachable(err); ok {
		// Connections to a PVE that went away are dead; the next call dials afresh.
		s.http.CloseIdleConnections()
		return providersdk.Unreachable(&causeError{msg: msg, cause: err})
	}
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.StatusCode == http.StatusUnauthorized:
			return providersdk.Unauthorized(&causeError{
				msg:   fmt.Sprintf("Proxmox VE %s rejected the API token or password in Secret %s", s.host, s.secretRef),
				cause: err,
			})
		case apiErr.StatusCode == http.StatusForbidden:
			return providersdk.Permanent(infrav1.MachinePermissionDeniedReason,
				"the Proxmox VE user of Secret %s may not %s: %s", s.secretRef, what, message(err))
		case errors.Is(err, proxmox.ErrNodeUnreachable):
			return providersdk.Unreachable(&causeError{
				msg:   fmt.Sprintf("Proxmox VE %s cannot reach the node of %s (%s); the node may be down", s.host, what, apiErr.Status),
				cause: err,
			})
		}
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// typed reports whether err already carries one of the SDK's typed errors.
func typed(err error) bool {
	return providersdk.IsUnreachable(err) || providersdk.IsUnauthorized(err) ||
		providersdk.IsPermanent(err) || providersdk.IsInFlight(err)
}

// notFound reports whether a PVE call failed because what it names does not exist.
func notFound(err error) bool { return errors.Is(err, proxmox.ErrNotFound) }

// message is PVE's own text of a failed call, without the request.
func message(err error) string {
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		if m := strings.TrimSpace(apiErr.Message); m != "" {
			return m
		}
		return apiErr.Status
	}
	return err.Error()
}

// unreachable returns a message a person can act on when err means PVE could not be
// reached or trusted.
func (s *session) unreachable(err error) (string, bool) {
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
		return fmt.Sprintf("Proxmox VE %s presents a TLS certificate signed by an unknown authority; "+
			"set spec.connection.caBundle to the PEM certificate of the CA that signed it "+
			"(/etc/pve/pve-root-ca.pem on a node), or spec.connection.insecureSkipTLSVerify for test backends only", s.host), true
	case errors.As(err, &hostname):
		return fmt.Sprintf("the TLS certificate of Proxmox VE is not valid for %s; "+
			"use a host name the certificate names in spec.connection.endpoint", s.host), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("Proxmox VE %s presents an invalid TLS certificate: %s", s.host, invalid.Error()), true
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve Proxmox VE host %q; check spec.connection.endpoint", dnsErr.Name), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("Proxmox VE %s refused the connection; check spec.connection.endpoint (port 8006) and that pveproxy runs", s.host), true
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("Proxmox VE %s did not answer in time; check the network path to it and its load", s.host), true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.EPIPE):
		return fmt.Sprintf("Proxmox VE %s closed the connection; it may be restarting", s.host), true
	case errors.As(err, &urlErr), errors.As(err, &netErr):
		return fmt.Sprintf("cannot reach Proxmox VE %s: %s; check spec.connection.endpoint", s.host, rootCause(err)), true
	}
	return "", false
}

// rootCause returns the innermost error's text: the part of a url.Error that does not
// repeat the request.
func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// causeError is a message for a person that keeps the error it explains.
type causeError struct {
	msg   string
	cause error
}

// Error returns the message.
func (e *causeError) Error() string { return e.msg }

// Unwrap returns the cause.
func (e *causeError) Unwrap() error { return e.cause }
