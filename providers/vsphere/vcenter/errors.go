package vcenter

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// ErrNotFound says the object a call names does not exist (any more).
var ErrNotFound = errors.New("not found in vCenter")

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// notFound is ErrNotFound for what.
func notFound(what string) error { return fmt.Errorf("%s: %w", what, ErrNotFound) }

// FaultKind is what a vCenter fault means to the driver.
type FaultKind string

// The kinds of fault the driver tells apart.
const (
	// FaultOther is any fault the driver does not branch on.
	FaultOther FaultKind = ""
	// FaultDuplicateName: an object with the name already exists in the folder.
	FaultDuplicateName FaultKind = "DuplicateName"
	// FaultInvalidPowerState: the VM is not in the power state the operation needs,
	// often because it already is in the one asked for.
	FaultInvalidPowerState FaultKind = "InvalidPowerState"
	// FaultConcurrentAccess: the object changed since the caller read it (a
	// reconfiguration named a stale config.changeVersion).
	FaultConcurrentAccess FaultKind = "ConcurrentAccess"
)

// Fault is a vCenter fault: of a failed task, or of a call that DuplicateName or
// ConcurrentAccess refused.
type Fault struct {
	// Kind is what the fault means.
	Kind FaultKind
	// Object is the managed object the fault names, e.g. the VM that has a
	// DuplicateName's name; zero when it names none.
	Object Ref
	// Message is vCenter's message, or the fault's type when it gave none.
	Message string
}

// Error returns the fault's message.
func (f *Fault) Error() string { return f.Message }

// AsDuplicateName reports whether err is a DuplicateName fault, and the object that has
// the name (zero when vCenter did not say).
func AsDuplicateName(err error) (object Ref, ok bool) {
	var f *Fault
	if errors.As(err, &f) && f.Kind == FaultDuplicateName {
		return f.Object, true
	}
	return Ref{}, false
}

// IsConcurrentAccess reports whether err is a ConcurrentAccess fault: the object
// changed since it was read, and is to be read again.
func IsConcurrentAccess(err error) bool {
	var f *Fault
	return errors.As(err, &f) && f.Kind == FaultConcurrentAccess
}

// faultOf reads a task's fault.
func faultOf(f *types.LocalizedMethodFault) *Fault {
	out := &Fault{Message: faultMessage(f)}
	if f == nil {
		return out
	}
	var dup *types.DuplicateName
	switch {
	case asFault(f, &dup):
		out.Kind, out.Object = FaultDuplicateName, refOf(dup.Object)
	case fault.Is(f, &types.InvalidPowerState{}):
		out.Kind = FaultInvalidPowerState
	case fault.Is(f, &types.ConcurrentAccess{}):
		out.Kind = FaultConcurrentAccess
	}
	return out
}

// asFault is fault.As reporting only whether it matched.
func asFault[T any](err any, target *T) bool {
	_, ok := fault.As(err, target)
	return ok
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

// fail turns the error of a vCenter call made to do what into the SDK's typed errors:
// connection and certificate problems become Unreachable, rejected credentials
// Unauthorized, missing privileges Retryable (PermissionDenied), a busy VM InFlight; anything else is
// wrapped as "failed to <what>".
func (c *Client) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if providersdk.IsClassified(err) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	if msg, ok := c.network.Problem(err); ok {
		// Connections to a vCenter that went away are dead; the next call dials afresh.
		c.soap.CloseIdleConnections()
		return providersdk.Unreachable(providersdk.Explained(msg, err))
	}
	if fault.Is(err, &types.InvalidLogin{}) || fault.Is(err, &types.NotAuthenticated{}) {
		return providersdk.Unauthorized(providersdk.Explained(fmt.Sprintf("vCenter %s rejected the username or password in Secret %s", c.host, c.secretRef), err))
	}
	var perm *types.NoPermission
	if asFault(err, &perm) {
		obj := "an object"
		if perm.Object != nil {
			obj = perm.Object.Value
		}
		return providersdk.Retryable(infrav1.MachinePermissionDeniedReason,
			"the vCenter user of Secret %s lacks privilege %s on %s, needed to %s", c.secretRef, perm.PrivilegeId, obj, what)
	}
	if fault.Is(err, &types.TaskInProgress{}) {
		return providersdk.InFlight("task", "")
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}
