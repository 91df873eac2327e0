package proxmox

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

// fail turns the error of a PVE call doing what into the SDK's typed errors: connection
// and certificate problems become Unreachable, rejected credentials Unauthorized, a
// missing privilege Permanent; the rest keeps PVE's message and stays an *APIError
// underneath, for callers that branch on it.
func (s *session) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if providersdk.IsClassified(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if msg, ok := s.endpoint.Problem(err); ok {
		// Connections to a PVE that went away are dead; the next call dials afresh.
		s.http.CloseIdleConnections()
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.StatusCode == http.StatusUnauthorized:
			return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("Proxmox VE %s rejected the API token or password in Secret %s", s.host, s.secretRef), err))
		case apiErr.StatusCode == http.StatusForbidden:
			return providersdk.Permanent(infrav1.MachinePermissionDeniedReason,
				"the Proxmox VE user of Secret %s may not %s: %s", s.secretRef, what, message(err))
		case errors.Is(err, proxmox.ErrNodeUnreachable):
			return providersdk.Unreachable(providersdk.Explained(fmt.Sprintf("Proxmox VE %s cannot reach the node of %s (%s); the node may be down", s.host, what, apiErr.Status), err))
		}
	}
	return fmt.Errorf("failed to %s: %w", what, err)
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
