package pve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/luthermonson/go-proxmox"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ErrNotFound is what a call fails with, underneath, when what it names does not
// exist: errors.Is(err, ErrNotFound), or IsNotFound.
var ErrNotFound = errors.New("not found in Proxmox VE")

// IsNotFound reports whether a call failed because what it names does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsNodeUnreachable reports whether a call failed because the API could not forward
// it to the node it names (PVE's 595 and 596): the node may be down while the rest of
// the cluster answers.
func IsNodeUnreachable(err error) bool { return errors.Is(err, proxmox.ErrNodeUnreachable) }

// IsVMIDTaken reports whether PVE refused to make a VM because its VMID is taken
// ("config file already exists", "VM 101 already exists").
func IsVMIDTaken(err error) bool { return strings.Contains(Message(err), "already exists") }

// notFoundError is a PVE error whose object does not exist: it matches ErrNotFound
// and keeps PVE's error underneath.
type notFoundError struct{ err error }

func (e notFoundError) Error() string   { return e.err.Error() }
func (e notFoundError) Unwrap() []error { return []error{ErrNotFound, e.err} }

// fail turns the error of a PVE call doing what into the SDK's typed errors: connection
// and certificate problems become Unreachable, rejected credentials Unauthorized, a
// missing privilege Permanent; the rest keeps PVE's message and stays a go-proxmox
// *APIError underneath (Message reads it), matching ErrNotFound when PVE says the
// object does not exist.
func (c *Client) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if providersdk.IsClassified(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if msg, ok := c.endpoint.Problem(err); ok {
		// Connections to a PVE that went away are dead; the next call dials afresh.
		c.http.CloseIdleConnections()
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.StatusCode == http.StatusUnauthorized:
			return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("Proxmox VE %s rejected the API token or password in Secret %s", c.Host(), c.secretRef), err))
		case apiErr.StatusCode == http.StatusForbidden:
			return providersdk.Permanent(infrav1.MachinePermissionDeniedReason,
				"the Proxmox VE user of Secret %s may not %s: %s", c.secretRef, what, Message(err))
		case errors.Is(err, proxmox.ErrNodeUnreachable):
			return providersdk.Unreachable(providersdk.Explained(fmt.Sprintf("Proxmox VE %s cannot reach the node of %s (%s); the node may be down", c.Host(), what, apiErr.Status), err))
		}
	}
	if errors.Is(err, proxmox.ErrNotFound) {
		err = notFoundError{err: err}
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// Refused turns PVE's refusal of a request that does what into a Permanent error when
// retrying cannot help (a missing node, storage or pool, local storage on another
// node, a linked clone of a VM that is not a template), keeping PVE's message. Other
// errors are returned as they are.
func Refused(what string, err error) error {
	if err == nil || providersdk.IsClassified(err) {
		return err
	}
	msg := Message(err)
	for _, p := range []string{"does not exist", "no such", "can't clone", "not allowed", "not supported", "not available"} {
		if strings.Contains(strings.ToLower(msg), p) {
			return providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "Proxmox VE refused to %s: %s", what, msg)
		}
	}
	return err
}

// Message is PVE's own text of a failed call, without the request.
func Message(err error) string {
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		if m := strings.TrimSpace(apiErr.Message); m != "" {
			return m
		}
		return apiErr.Status
	}
	return err.Error()
}
