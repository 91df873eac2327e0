package pve

import (
	"context"
	"errors"
	"strings"
	"testing"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

func TestAMissingPrivilegeIsAPermissionErrorNamingIt(t *testing.T) {
	const token = "viewer@pve!t"
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.Users = map[string]string{"viewer@pve": "pw"}
		o.Tokens = map[string]string{token: "s"}
		o.ACL = []proxmoxsim.ACL{{Path: "/", UGID: "viewer@pve", Role: "PVEAuditor"}}
	})
	ctx := context.Background()
	c := newClient(t, sim, map[string][]byte{TokenIDKey: []byte(token), TokenSecretKey: []byte("s")})
	tests := []struct {
		name            string
		call            func() error
		path, privilege string
		message         string
	}{{
		name: "a power action PVE names the privilege of",
		call: func() error { _, err := c.Start(ctx, proxmoxtest.Node1, proxmoxtest.TemplateVMID); return err },
		path: "/vms/9000", privilege: "VM.PowerMgmt",
		message: "the Proxmox VE user of Secret infra/pve-credentials may not POST /nodes/pve1/qemu/9000/status/start: it lacks VM.PowerMgmt on /vms/9000 (Proxmox VE: Permission check failed (/vms/9000, VM.PowerMgmt))",
	}, {
		name: "a clone by a user without VM.Clone on the template",
		call: func() error {
			_, err := c.Clone(ctx, proxmoxtest.Node1, proxmoxtest.TemplateVMID, CloneOptions{NewID: 150})
			return err
		},
		message: "it lacks VM.Clone on /vms/9000",
		path:    "/vms/9000", privilege: "VM.Clone",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			pe, ok := AsPermissionError(err)
			if !ok {
				t.Fatalf("error %v is no PermissionError", err)
			}
			if pe.Path != tt.path || pe.Privilege != tt.privilege {
				t.Errorf("missing %q on %q, want %q on %q", pe.Privilege, pe.Path, tt.privilege, tt.path)
			}
			var retry *providersdk.RetryableError
			if !errors.As(err, &retry) || retry.Reason != infrav1.MachinePermissionDeniedReason {
				t.Errorf("error %v is not Retryable with reason PermissionDenied", err)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("message %q does not say %q", err, tt.message)
			}
		})
	}
}
