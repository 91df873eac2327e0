package providersdk

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestErrorClassification(t *testing.T) {
	type class struct{ Permanent, InFlight, Unreachable bool }
	for _, tc := range []struct {
		name string
		err  error
		want class
	}{
		{"a permanent error is permanent", Permanent("BadImage", "template %q not found", "tpl"), class{Permanent: true}},
		{"a wrapped permanent error is still permanent", fmt.Errorf("failed to create VM: %w", Permanent("", "no")), class{Permanent: true}},
		{"an in-flight error is in flight", InFlight(OperationClone, "task-1"), class{InFlight: true}},
		{"an unreachable error is unreachable", Unreachable(errors.New("connection refused")), class{Unreachable: true}},
		{"a wrapped unreachable error is still unreachable", fmt.Errorf("observe: %w", Unreachable(errors.New("timeout"))), class{Unreachable: true}},
		{"a plain error is none of them", errors.New("boom"), class{}},
		{"no error is none of them", nil, class{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := class{IsPermanent(tc.err), IsInFlight(tc.err), IsUnreachable(tc.err)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("classification (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorsCarryWhatTheReconcilerNeeds(t *testing.T) {
	var p *PermanentError
	if !errors.As(fmt.Errorf("wrap: %w", Permanent("BadImage", "template %q not found", "tpl")), &p) {
		t.Fatal("errors.As did not find the PermanentError")
	}
	if diff := cmp.Diff(&PermanentError{Reason: "BadImage", Message: `template "tpl" not found`}, p); diff != "" {
		t.Errorf("permanent error (-want +got):\n%s", diff)
	}
	var f *InFlightError
	if !errors.As(InFlight(OperationDelete, "upid-1"), &f) {
		t.Fatal("errors.As did not find the InFlightError")
	}
	if diff := cmp.Diff(Task{Ref: "upid-1", Operation: OperationDelete}, f.Task); diff != "" {
		t.Errorf("in-flight task (-want +got):\n%s", diff)
	}
	cause := errors.New("dial tcp: connection refused")
	if !errors.Is(Unreachable(cause), cause) {
		t.Error("an unreachable error does not unwrap to its cause")
	}
}

func TestTaskReason(t *testing.T) {
	got := map[string]string{}
	for _, op := range []string{OperationCreate, OperationClone, OperationUpdate, OperationDelete, "snapshot"} {
		got[op] = taskReason(op)
	}
	want := map[string]string{"create": "Creating", "clone": "Cloning", "update": "Updating", "delete": "Deleting", "snapshot": "TaskInFlight"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
}
