package providersdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/banlieue/banlieue/pkg/redact"
)

// PermanentError is a failure that retrying cannot fix: the Reconciler sets Ready=False
// with its reason and message and does not requeue until the machine changes.
type PermanentError struct {
	// Reason is the Ready condition's reason; MachineFailedReason when empty.
	Reason string
	// Message is the Ready condition's message. It must be deterministic and hold no secret.
	Message string
}

// Error returns the message.
func (e *PermanentError) Error() string { return e.Message }

// Permanent returns a PermanentError with reason and a message formatted from format and args.
func Permanent(reason, format string, args ...any) error {
	return &PermanentError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryableError says the backend (or the Provider) refused the machine for a cause that
// can be lifted without the machine changing: a privilege granted to the backend user, a
// namespace labelled, a Provider widened. The Reconciler sets Ready=False with Reason and
// Message and looks again with backoff; unlike a PermanentError it never fails the
// machine for good, which a Cluster API machine could not recover from.
type RetryableError struct {
	// Reason is the Ready condition's reason, e.g. MachinePermissionDeniedReason.
	Reason string
	// Message says what was refused and what lifts it. It must hold no secret.
	Message string
}

// Error returns the message.
func (e *RetryableError) Error() string { return e.Message }

// Retryable returns a RetryableError with reason and a formatted message.
func Retryable(reason, format string, args ...any) error {
	return &RetryableError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// InFlightError says the backend is busy with a task for the machine: the Reconciler
// records the task (when it has a Ref) and requeues after a short, growing interval.
type InFlightError struct {
	// Task is the task in flight.
	Task Task
}

// Error describes the task.
func (e *InFlightError) Error() string {
	if e.Task.Ref == "" {
		return fmt.Sprintf("backend %s is in progress", e.Task.Operation)
	}
	return fmt.Sprintf("backend task %s (%s) is in flight", e.Task.Ref, e.Task.Operation)
}

// InFlight returns an InFlightError for the task ref doing operation.
func InFlight(operation, ref string) error {
	return &InFlightError{Task: Task{Ref: ref, Operation: operation}}
}

// IsInFlight reports whether err is, or wraps, an InFlightError.
func IsInFlight(err error) bool {
	var f *InFlightError
	return errors.As(err, &f)
}

// UnreachableError says the backend could not be reached: the Reconciler drops the
// cached session, sets Ready=False and requeues with backoff.
type UnreachableError struct {
	// Err is the cause. Its text is shown in the Ready condition, so it must hold no secret.
	Err error
}

// Error returns the cause's text.
func (e *UnreachableError) Error() string { return "backend unreachable: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Unreachable wraps err as an UnreachableError.
func Unreachable(err error) error { return &UnreachableError{Err: err} }

// IsUnreachable reports whether err is, or wraps, an UnreachableError.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}

// UnauthorizedError says the backend refused the Provider's credentials: the Provider's
// CredentialsValid condition turns False and machines wait with backoff.
type UnauthorizedError struct {
	// Err is the cause. Its text is shown in conditions, so it must hold no secret.
	Err error
}

// Error returns the cause's text.
func (e *UnauthorizedError) Error() string { return "credentials rejected: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *UnauthorizedError) Unwrap() error { return e.Err }

// Unauthorized wraps err as an UnauthorizedError.
func Unauthorized(err error) error { return &UnauthorizedError{Err: err} }

// IsUnauthorized reports whether err is, or wraps, an UnauthorizedError.
func IsUnauthorized(err error) bool {
	var u *UnauthorizedError
	return errors.As(err, &u)
}

// TaskFailedError says a backend task the machine was waiting for failed: the Reconciler
// clears the task, sets Ready=False with the backend's message and retries with backoff.
type TaskFailedError struct {
	// Task is the task that failed.
	Task Task
	// Message is the backend's error text. It must hold no secret.
	Message string
}

// Error describes the failure.
func (e *TaskFailedError) Error() string {
	return fmt.Sprintf("backend %s task failed: %s", e.Task.Operation, e.Message)
}

// TaskFailed returns a TaskFailedError for task with the backend's message.
func TaskFailed(task Task, message string) error {
	return &TaskFailedError{Task: task, Message: message}
}

// ErrSessionClosed is the error of a call on a session after its Disconnect (see
// Client). The call reached no backend: the Reconciler looks again soon, with the
// Provider's current session, and keeps the conditions it had.
var ErrSessionClosed = errors.New("the backend session was closed")

// sessionClosedRetry is how soon a machine reconcile or a Provider check whose session
// was closed under it runs again, with the session that replaced it.
const sessionClosedRetry = time.Second

// DefaultCallTimeout bounds one reconcile's backend calls, so a backend that hangs
// never holds a worker: it is reported as unreachable and retried with backoff.
const DefaultCallTimeout = time.Minute

// withBackend runs f with a context that ends after timeout; f's error is returned as
// an UnreachableError when the deadline cut it short.
func withBackend(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := f(bctx)
	if err != nil && errors.Is(bctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil && !IsUnreachable(err) {
		return Unreachable(fmt.Errorf("the backend did not answer within %s", timeout))
	}
	return err
}

// IsClassified reports whether err already carries one of the SDK's typed errors, so a
// driver's error mapping leaves it as it is.
func IsClassified(err error) bool {
	var tf *TaskFailedError
	return IsUnreachable(err) || IsUnauthorized(err) || IsPermanent(err) || IsInFlight(err) || errors.As(err, &tf) ||
		errors.Is(err, ErrSessionClosed)
}

// redacted is err with its text redacted, for an error returned to controller-runtime,
// which logs it: a backend's or a library's error may quote a URL with its credentials.
func redacted(err error) error {
	if msg := redact.Text(err.Error()); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}
