package vsphere

import (
	"context"
	"errors"
	"fmt"

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
	if providersdk.IsClassified(err) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	if msg, ok := s.network.Problem(err); ok {
		// Connections to a vCenter that went away are dead; the next call dials afresh.
		s.soap.CloseIdleConnections()
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	if fault.Is(err, &types.InvalidLogin{}) || fault.Is(err, &types.NotAuthenticated{}) {
		return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("vCenter %s rejected the username or password in Secret %s", s.host, s.secretRef), err))
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
