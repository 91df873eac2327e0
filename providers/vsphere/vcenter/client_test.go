package vcenter

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmware/govmomi/task"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// connect logs in to the simulator as the driver does and logs out when the test ends.
func connect(t *testing.T, sim *vspheretest.Simulator) *Client {
	t.Helper()
	u, err := ParseURL(sim.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = nil
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(sim.CAPEM)
	c, err := Connect(context.Background(), Config{
		URL: u, RootCAs: roots, ResponseTimeout: time.Minute, KeepAlive: time.Minute,
		Username: sim.Username, Password: sim.Password, SecretRef: "infra/vc-credentials",
		IdentityKey: "banlieue.machine.uid", MetricsClass: "vsphere",
	})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestRejectedReloginIsUnauthorized(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	c := connect(t, sim)
	// The password changed on vCenter and the session ended: the re-login fails.
	c.auth.password = "rotated"
	if err := sim.TerminateSessions(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.Discover(ctx)
	switch {
	case !providersdk.IsUnauthorized(err):
		t.Fatalf("Discover after a rejected re-login: %v, want Unauthorized", err)
	case !strings.Contains(err.Error(), "Secret infra/vc-credentials"), strings.Contains(err.Error(), "rotated"):
		t.Fatalf("error %q should name the Secret and not hold the password", err)
	}
}

func TestAClosedSessionNeverLogsInAgain(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	c := connect(t, sim)
	open, err := sim.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A reconcile still holding the session when it is closed, with a call in flight.
	gen, err := c.auth.current()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Discover(ctx); !errors.Is(err, providersdk.ErrSessionClosed) {
		t.Errorf("Discover after Close: %v, want ErrSessionClosed", err)
	}
	if err := c.auth.relogin(ctx, gen); !errors.Is(err, providersdk.ErrSessionClosed) {
		t.Errorf("a call in flight at Close, answered NotAuthenticated, logged in again: %v", err)
	}
	if left, err := sim.Sessions(ctx); err != nil || left != open-1 {
		t.Errorf("vCenter holds %d sessions (%v) after the client's was closed, want %d", left, err, open-1)
	}
}

func TestMissingObjectsAreNotFound(t *testing.T) {
	sim := vspheretest.Start(t)
	ctx := context.Background()
	c := connect(t, sim)
	tests := []struct {
		name string
		call func() error
	}{{
		name: "no VM has the instance UUID",
		call: func() error { _, err := c.FindVM(ctx, "00000000-0000-4000-8000-000000000000"); return err },
	}, {
		name: "a VM ID that does not exist",
		call: func() error { _, err := c.ReadVM(ctx, Ref{Type: "VirtualMachine", Value: "vm-999999"}); return err },
	}, {
		name: "a template name that no template has",
		call: func() error { _, err := c.FindTemplate(ctx, "debian-13"); return err },
	}, {
		name: "a VM that is not a template, by its path",
		call: func() error { _, err := c.FindTemplate(ctx, "/DC0/vm/DC0_H0_VM0"); return err },
	}, {
		name: "a running VM read as a template by its ID, as a hostile machine's resolvedRef names it",
		call: func() error {
			vm, err := c.FindByInventoryPath(ctx, "/DC0/vm/DC0_H0_VM0", "VM")
			if err != nil {
				return err
			}
			_, err = c.ReadTemplate(ctx, vm)
			return err
		},
	}, {
		name: "an inventory path that leads nowhere",
		call: func() error { _, err := c.FindByInventoryPath(ctx, "/DC0/vm/no-such-folder", "folder"); return err },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !IsNotFound(err) {
				t.Errorf("error %v, want ErrNotFound", err)
			}
		})
	}
}

func TestATaskVCenterForgotIsDone(t *testing.T) {
	sim := vspheretest.Start(t)
	c := connect(t, sim)
	info, err := c.PollTask(context.Background(), "task-999999")
	if err != nil || info.State != TaskDone {
		t.Fatalf("PollTask of an unknown task = %+v, %v; want TaskDone", info, err)
	}
}

// TestAMissingPrivilegeIsRetried: a NoPermission fault names the privilege and the
// object, and is Retryable: granting the privilege on vCenter lifts it while nothing
// about the machine changes, so the machine must not be failed for good.
func TestAMissingPrivilegeIsRetried(t *testing.T) {
	c := &Client{secretRef: "infra/vc-credentials"}
	err := c.fail("clone the template", task.Error{LocalizedMethodFault: &types.LocalizedMethodFault{Fault: &types.NoPermission{
		PrivilegeId: "VirtualMachine.Provisioning.Clone",
		Object:      &types.ManagedObjectReference{Type: "VirtualMachine", Value: "vm-42"},
	}}})
	var retry *providersdk.RetryableError
	switch {
	case !errors.As(err, &retry), providersdk.IsPermanent(err):
		t.Fatalf("fail = %#v, want a RetryableError and not a PermanentError", err)
	case retry.Reason != infrav1.MachinePermissionDeniedReason:
		t.Errorf("reason %q, want %q", retry.Reason, infrav1.MachinePermissionDeniedReason)
	case retry.Message != "the vCenter user of Secret infra/vc-credentials lacks privilege VirtualMachine.Provisioning.Clone on vm-42, needed to clone the template":
		t.Errorf("message %q", retry.Message)
	}
}

// Calls one after another reuse one connection: a connection whose response body
// was left unread to its end would be closed, and each next call would make a new
// one, a TLS handshake's CPU on both sides.
func TestCallsReuseTheirConnection(t *testing.T) {
	sim := vspheretest.Start(t)
	c := connect(t, sim)
	var fresh atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				fresh.Add(1)
			}
		},
	})
	const calls = 50
	for range calls {
		if _, err := methods.GetCurrentTime(ctx, c.vim); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Discover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := fresh.Load(); n > 1 {
		t.Errorf("%d calls made %d new connections, want at most 1", 2*calls, n)
	}
}
