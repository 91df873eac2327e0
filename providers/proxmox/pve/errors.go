package pve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/luthermonson/go-proxmox"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/redact"
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

// HotplugProblems are the config keys whose change PVE failed to hotplug into a
// running VM, with why: a config update's 400 "Parameter verification failed." whose
// errors say "hotplug problem - …". PVE wrote the config before it answered, the
// changes it could make made and these left pending for the VM's next power cycle.
// Nil for any other error.
func HotplugProblems(err error) map[string]string {
	var apiErr *proxmox.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		return nil
	}
	var out map[string]string
	for k, msg := range apiErr.Errors {
		if why, ok := strings.CutPrefix(msg, "hotplug problem - "); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = strings.TrimSpace(why)
		}
	}
	return out
}

// notFoundError is a PVE error whose object does not exist: it matches ErrNotFound
// and keeps PVE's error underneath.
type notFoundError struct{ err error }

func (e notFoundError) Error() string   { return e.err.Error() }
func (e notFoundError) Unwrap() []error { return []error{ErrNotFound, e.err} }

// fail turns the error of a PVE call doing what into the SDK's typed errors: connection
// and certificate problems become Unreachable, rejected credentials Unauthorized, a
// missing privilege a PermissionError (Retryable, naming the privilege), no quorum
// Unreachable; the rest keeps PVE's message and stays a go-proxmox
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
			return newPermissionError(fmt.Sprintf("the Proxmox VE user of Secret %s may not %s", c.secretRef, what), apiErr)
		case errors.Is(err, proxmox.ErrNodeUnreachable):
			return providersdk.Unreachable(providersdk.Explained(fmt.Sprintf("Proxmox VE %s cannot reach the node of %s (%s); the node may be down", c.Host(), what, apiErr.Status), err))
		case apiErr.StatusCode == http.StatusInternalServerError && IsNoQuorum(Message(err)):
			// Retried as an outage: the change is made once quorum is back.
			return providersdk.Unreachable(providersdk.Explained(fmt.Sprintf("the Proxmox VE cluster at %s has no quorum, so it refuses to %s (%s); "+
				"bring enough of its nodes back online (pvecm status shows the votes)", c.Host(), what, Message(err)), err))
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

// Message is PVE's own text of a failed call, without the request: the message of its
// JSON error body (PVE >= 8.3), else the HTTP reason phrase, with any URL's
// credentials redacted.
func Message(err error) string {
	var apiErr *proxmox.APIError
	if errors.As(err, &apiErr) {
		if m := strings.TrimSpace(apiErr.Message); m != "" {
			return redact.Text(m)
		}
		return redact.Text(apiErr.Status)
	}
	return redact.Text(err.Error())
}

// PermissionError is PVE's 403: the user or API token lacks a privilege. Underneath
// it is a providersdk.RetryableError with reason PermissionDenied, whose message says
// what was refused and which privilege on which path it needs: granting it on PVE
// lifts the refusal without the machine changing.
type PermissionError struct {
	// Path and Privilege are what PVE's "Permission check failed (<path>,
	// <privilege>)" names; both empty when PVE names nothing (a check that any of
	// several grants would pass), and then the message says what the call needs.
	Path, Privilege string
	perm            *providersdk.RetryableError
}

func (e *PermissionError) Error() string { return e.perm.Message }

// Unwrap returns the RetryableError the SDK reports.
func (e *PermissionError) Unwrap() error { return e.perm }

// AsPermissionError finds the PermissionError in err's chain.
func AsPermissionError(err error) (*PermissionError, bool) {
	var pe *PermissionError
	return pe, errors.As(err, &pe)
}

var permissionCheck = regexp.MustCompile(`^Permission check failed \((\S+), ([^)]+)\)`)

// privilegeHints say what a call needs when PVE's 403 names no privilege: checks in
// which any of several grants passes (VM.Allocate on the new VMID or on the pool).
var privilegeHints = map[string]string{
	"POST /nodes/{node}/qemu/{vmid}/clone":              "it needs VM.Clone on /vms/{vmid} and VM.Allocate on the new VM's /vms/<vmid> (or on its pool's /pool/<name>)",
	"POST /nodes/{node}/qemu":                           "it needs VM.Allocate on the new VM's /vms/<vmid> (or on its pool's /pool/<name>)",
	"POST /nodes/{node}/storage/{storage}/download-url": "it needs Sys.Audit and Sys.Modify on /, or Sys.AccessNetwork on /nodes/{node}",
}

func newPermissionError(refused string, apiErr *proxmox.APIError) *PermissionError {
	msg := Message(apiErr)
	pe := &PermissionError{}
	if m := permissionCheck.FindStringSubmatch(msg); m != nil {
		pe.Path, pe.Privilege = m[1], m[2]
		msg = fmt.Sprintf("%s: it lacks %s on %s (Proxmox VE: %s)", refused, pe.Privilege, pe.Path, msg)
	} else if hint, ok := privilegeHints[apiErr.Method+" "+pathTemplate(apiPath(apiErr.Path))]; ok {
		msg = fmt.Sprintf("%s: %s (Proxmox VE: %s)", refused, fillHint(hint, apiPath(apiErr.Path)), msg)
	} else {
		msg = refused + ": " + msg
	}
	pe.perm = &providersdk.RetryableError{Reason: infrav1.MachinePermissionDeniedReason, Message: msg}
	return pe
}

// apiPath is a request path without the API's /api2/json prefix.
func apiPath(p string) string {
	if _, rest, ok := strings.Cut(p, "/api2/json"); ok {
		return rest
	}
	return p
}

// fillHint puts a path's node and VMID into a hint's {node} and {vmid}.
func fillHint(hint, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(segs); i++ {
		switch segs[i] {
		case "nodes":
			hint = strings.ReplaceAll(hint, "{node}", segs[i+1])
		case "qemu":
			hint = strings.ReplaceAll(hint, "{vmid}", segs[i+1])
		}
	}
	return hint
}
