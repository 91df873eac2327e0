package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// fail turns the error of a libvirt call made to do what into the SDK's typed errors:
// connection, SSH host key and certificate problems become Unreachable, rejected
// credentials Unauthorized; anything else is wrapped as "failed to <what>".
func (s *session) fail(what string, err error) error {
	if err == nil || providersdk.IsClassified(err) {
		return err
	}
	var (
		lerr    libvirt.Error
		refused *certRefusedError
	)
	switch {
	case errors.As(err, &lerr):
		switch libvirt.ErrorNumber(lerr.Code) {
		case libvirt.ErrAuthFailed, libvirt.ErrAuthCancelled, libvirt.ErrAuthUnavailable:
			return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("libvirt at %s refused access: %s", s.ep.safe, lerr.Message), err))
		}
		return fmt.Errorf("failed to %s: %w", what, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("failed to %s: %w", what, err)
	case errors.As(err, &refused):
		return providersdk.Unauthorized(providersdk.Explained(refused.Error(), err))
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		return providersdk.Unauthorized(providersdk.Explained(
			fmt.Sprintf("SSH server %s rejected the key in Secret %s for user %q", s.ep.addr, s.secretRef, s.ep.user), err))
	}
	if msg, ok := s.unreachable(err); ok {
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// unreachable returns a message a person can act on when err means libvirtd could not
// be reached or trusted: the SSH and socket cases here, the network and TLS ones from
// the SDK.
func (s *session) unreachable(err error) (string, bool) {
	var (
		hostKey *hostKeyError
		sshExit *ssh.OpenChannelError
	)
	switch {
	case errors.As(err, &hostKey):
		return hostKey.Error() + "; add the host's key (ssh-keyscan) to it", true
	case errors.As(err, &sshExit):
		return fmt.Sprintf("the SSH server at %s could not open libvirtd's socket %s: %s", s.ep.addr, s.ep.socket, sshExit.Message), true
	case errors.Is(err, syscall.ENOENT):
		return fmt.Sprintf("libvirtd's socket %s does not exist; check spec.connection.endpoint and that libvirtd runs", s.ep.socket), true
	}
	if msg, ok := s.network().Problem(err); ok {
		return msg, true
	}
	if isConnectionError(err) {
		return fmt.Sprintf("libvirtd at %s closed the connection; it may be restarting", s.ep.safe), true
	}
	return "", false
}

// network names the session's libvirtd for the SDK's messages.
func (s *session) network() providersdk.Endpoint {
	return providersdk.Endpoint{
		Kind: "libvirtd", Host: s.ep.safe,
		CAHint:      "libvirt's is /etc/pki/CA/cacert.pem on the host",
		RefusedHint: " and that libvirtd runs (listening for TLS with --listen and listen_tls, for qemu+tls)",
	}
}

// isConnectionError reports whether err means the connection to libvirtd is gone.
// go-libvirt reports a call on a closed connection as EINVAL or ErrInterrupted.
func isConnectionError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EINVAL) || errors.Is(err, libvirt.ErrInterrupted)
}

// isCode reports whether err is a libvirt error with one of codes.
func isCode(err error, codes ...libvirt.ErrorNumber) bool {
	var lerr libvirt.Error
	if !errors.As(err, &lerr) {
		return false
	}
	for _, c := range codes {
		if libvirt.ErrorNumber(lerr.Code) == c {
			return true
		}
	}
	return false
}
