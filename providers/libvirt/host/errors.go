package host

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

// ErrNotFound is what every NotFoundError is (errors.Is): the object asked for does
// not exist on the host.
var ErrNotFound = errors.New("not found")

// Kinds of object a NotFoundError names.
const (
	// KindDomain is a libvirt domain.
	KindDomain = "domain"
	// KindPool is a storage pool.
	KindPool = "storage pool"
	// KindVolume is a storage volume.
	KindVolume = "storage volume"
)

// NotFoundError says an object does not exist on the host.
type NotFoundError struct {
	// Kind is what is missing: KindDomain, KindPool or KindVolume.
	Kind string
	// Name names it: a UUID, a pool's name, "<pool>/<volume>" or a path.
	Name string
}

// Error names the object.
func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s does not exist", e.Kind, e.Name) }

// Is makes every NotFoundError ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsNotFoundKind reports whether err says an object of kind does not exist.
func IsNotFoundKind(err error, kind string) bool {
	var nf *NotFoundError
	return errors.As(err, &nf) && nf.Kind == kind
}

// ErrInvalidRef says a volume reference is neither "<pool>/<volume>" nor an absolute path.
var ErrInvalidRef = errors.New("neither <pool>/<volume> nor an absolute path")

// NameInUseError says a domain could not be defined because another domain, with
// another UUID, has its name.
type NameInUseError struct {
	// Name is the name both want.
	Name string
	// UUID is the other domain's.
	UUID string
}

// Error names the other domain.
func (e *NameInUseError) Error() string {
	return fmt.Sprintf("a domain named %q already exists with UUID %s", e.Name, e.UUID)
}

// fail turns the error of a libvirt call made to do what into the SDK's typed errors:
// connection, SSH host key and certificate problems become Unreachable, rejected
// credentials Unauthorized; anything else is wrapped as "failed to <what>". Errors
// already typed, and not-found errors, are returned as they are.
func (c *Client) fail(what string, err error) error {
	if err == nil || providersdk.IsClassified(err) || IsNotFound(err) {
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
			return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("libvirt at %s refused access: %s", c.ep.safe, lerr.Message), err))
		}
		return fmt.Errorf("failed to %s: %w", what, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("failed to %s: %w", what, err)
	case errors.As(err, &refused):
		return providersdk.Unauthorized(providersdk.Explained(refused.Error(), err))
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		return providersdk.Unauthorized(providersdk.Explained(
			fmt.Sprintf("SSH server %s rejected the key in Secret %s for user %q", c.ep.addr, c.secretRef, c.ep.user), err))
	}
	if msg, ok := c.unreachable(err); ok {
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// unreachable returns a message a person can act on when err means libvirtd could not
// be reached or trusted: the SSH and socket cases here, the network and TLS ones from
// the SDK.
func (c *Client) unreachable(err error) (string, bool) {
	var (
		hostKey *hostKeyError
		sshExit *ssh.OpenChannelError
	)
	switch {
	case errors.As(err, &hostKey):
		return hostKey.Error() + "; add the host's key (ssh-keyscan) to it", true
	case errors.As(err, &sshExit):
		return fmt.Sprintf("the SSH server at %s could not open libvirtd's socket %s: %s", c.ep.addr, c.ep.socket, sshExit.Message), true
	case errors.Is(err, syscall.ENOENT):
		return fmt.Sprintf("libvirtd's socket %s does not exist; check spec.connection.endpoint and that libvirtd runs", c.ep.socket), true
	}
	if msg, ok := c.network().Problem(err); ok {
		return msg, true
	}
	if isConnectionError(err) {
		return fmt.Sprintf("libvirtd at %s closed the connection; it may be restarting", c.ep.safe), true
	}
	return "", false
}

// network names the client's libvirtd for the SDK's messages.
func (c *Client) network() providersdk.Endpoint {
	return providersdk.Endpoint{
		Kind: "libvirtd", Host: c.ep.safe,
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

// KVMRefusedError says QEMU could not use KVM for a domain of type kvm: the host's
// /dev/kvm is missing, or closed to the user QEMU runs as (libvirt-qemu on a stock
// host, where the device is often 0600 root), though libvirt offered kvm.
type KVMRefusedError struct {
	// QEMU is QEMU's (or libvirt's) own line saying so.
	QEMU string
	err  error
}

// Error quotes QEMU.
func (e *KVMRefusedError) Error() string { return "QEMU cannot use KVM: " + e.QEMU }

// Unwrap returns libvirt's whole error.
func (e *KVMRefusedError) Unwrap() error { return e.err }

// kvmRefusals are the texts with which QEMU, and libvirt before it, refuse to run a
// domain on KVM, as they print them (QEMU's accel/kvm, libvirt's qemu_process.c).
var kvmRefusals = []string{
	"Could not access KVM kernel module",
	"failed to initialize kvm",
	"failed to initialize KVM",
	"Domain requires KVM, but it is not available",
}

// kvmRefused returns err as a KVMRefusedError, quoting the line of it that refuses
// KVM, when it is one; else nil.
func kvmRefused(err error) *KVMRefusedError {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, r := range kvmRefusals {
		i := strings.Index(msg, r)
		if i < 0 {
			continue
		}
		line := msg[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		return &KVMRefusedError{QEMU: strings.TrimSpace(line), err: err}
	}
	return nil
}
