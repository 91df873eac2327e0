package vsphere

import (
	"context"
	"testing"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

func TestAFailedTaskIsAFailureUnlessItLostARaceOrWasNotNeeded(t *testing.T) {
	for _, tt := range []struct {
		name      string
		operation string
		fault     vcenter.FaultKind
		wantFail  bool
	}{
		{name: "a claim another won is observed again", operation: providersdk.OperationAdopt, fault: vcenter.FaultConcurrentAccess},
		{name: "a reconfiguration of a VM changed since it was read is observed again", operation: providersdk.OperationUpdate, fault: vcenter.FaultConcurrentAccess},
		{name: "a power operation the VM did not need", operation: providersdk.OperationUpdate, fault: vcenter.FaultInvalidPowerState},
		{name: "a clone's concurrent access is a failure", operation: providersdk.OperationClone, fault: vcenter.FaultConcurrentAccess, wantFail: true},
		{name: "any other fault is a failure", operation: providersdk.OperationUpdate, fault: "NoDiskSpace", wantFail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &providersdk.Machine{Task: providersdk.Task{Ref: "task-1", Operation: tt.operation}}
			err := (&session{}).taskFailed(context.Background(), m, &vcenter.Fault{Kind: tt.fault, Message: "vCenter said no"})
			if got := err != nil; got != tt.wantFail {
				t.Errorf("taskFailed = %v, want a failure: %v", err, tt.wantFail)
			}
		})
	}
}
