package vsphere

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// fail turns the error of a vCenter call made to do what into the SDK's typed errors:
// connection and certificate problems become Unreachable, rejected credentials
// Unauthorized, missing privileges Permanent, a busy VM InFlight; anything else is
// wrapped as "failed to <what>".
func (s *session) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if typed(err) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	if msg, ok := s.unreachable(err); ok {
		// Connections to a vCenter that went away are dead; the next call dials afresh.
		s.soap.CloseIdleConnections()
		return providersdk.Unreachable(&causeError{msg: msg, cause: err})
	}
	if fault.Is(err, &types.InvalidLogin{}) || fault.Is(err, &types.NotAuthenticated{}) {
		return providersdk.Unauthorized(&causeError{
			msg:   fmt.Sprintf("vCenter %s rejected the username or password in Secret %s", s.host, s.secretRef),
			cause: err,
		})
	}
	var perm *types.NoPermission
	if _, ok := fault.As(err, &perm); ok {
		obj := "an object"
		if perm.Object != nil {
			obj = perm.Object.Value
		}
		return providersdk.Permanent(infrav1.MachinePermissionDeniedReason,
			"the vCenter user of Secret %s lacks privilege %s on %s, needed to %s", s.secretRef, perm.PrivilegeId, obj, what)
	}
	if fault.Is(err, &types.TaskInProgress{}) {
		return providersdk.InFlight("task", "")
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// typed reports whether err already carries one of the SDK's typed errors.
func typed(err error) bool {
	return providersdk.IsUnreachable(err) || providersdk.IsUnauthorized(err) ||
		providersdk.IsPermanent(err) || providersdk.IsInFlight(err)
}

// unreachable returns a message a person can act on when err means vCenter could not
// be reached or trusted.
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
		return fmt.Sprintf("vCenter %s presents a TLS certificate signed by an unknown authority; "+
			"set spec.connection.caBundle to the PEM certificate of the CA that signed it "+
			"(or spec.connection.insecureSkipTLSVerify, for test backends only)", s.host), true
	case errors.As(err, &hostname):
		return fmt.Sprintf("vCenter's TLS certificate is not valid for %s; "+
			"use a host name the certificate names in spec.connection.endpoint", s.host), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("vCenter %s presents an invalid TLS certificate: %s", s.host, invalid.Error()), true
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve vCenter host %q; check spec.connection.endpoint", dnsErr.Name), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("vCenter %s refused the connection; check spec.connection.endpoint and that vCenter is running", s.host), true
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("vCenter %s did not answer in time; check the network path to it and its load", s.host), true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.EPIPE):
		return fmt.Sprintf("vCenter %s closed the connection; it may be restarting", s.host), true
	case errors.As(err, &urlErr), errors.As(err, &netErr):
		return fmt.Sprintf("cannot reach vCenter %s: %s; check spec.connection.endpoint", s.host, rootCause(err)), true
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

// faultMessage returns a task fault's message for a condition: the localized message,
// or the fault's type when vCenter gave none.
func faultMessage(f *types.LocalizedMethodFault) string {
	if f == nil {
		return "unknown error"
	}
	if f.LocalizedMessage != "" {
		return f.LocalizedMessage
	}
	if f.Fault != nil {
		return fmt.Sprintf("%T", f.Fault)
	}
	return "unknown error"
}
