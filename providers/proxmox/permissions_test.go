package proxmox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// providerPrivileges are the privileges the provider needs on / (propagated), as
// docs/providers/proxmox.md lists them: reading the cluster, cloning templates into
// new VMs, configuring, resizing, powering and deleting them, reading their guest
// agents, and the storage and bridge use that goes with it.
var providerPrivileges = []string{
	"Sys.Audit",
	"Datastore.Audit", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Allocate",
	"SDN.Use",
	"VM.Audit", "VM.Allocate", "VM.Clone", "VM.PowerMgmt", "VM.Monitor",
	"VM.Config.CPU", "VM.Config.Memory", "VM.Config.Disk", "VM.Config.Network", "VM.Config.HWType",
	"VM.Config.Options", "VM.Config.Cloudinit", "VM.Config.CDROM",
}

const (
	provUser  = "banlieue@pve"
	provToken = provUser + "!provider"
)

// startWithToken starts a simulator with a privilege-separated API token of a user
// who is PVEAdmin on /, the token holding a role with privs on /.
func startWithToken(t *testing.T, privs []string) (*proxmoxtest.Simulator, providersdk.ProviderInfo) {
	t.Helper()
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.Users = map[string]string{provUser: "secret-pw"}
		o.Tokens = map[string]string{provToken: "f00dfeed-0000-4000-8000-000000000001"}
		o.PrivSep = []string{provToken}
		o.Roles = map[string][]string{"BanlieueProvider": privs}
		o.ACL = []proxmoxsim.ACL{
			{Path: "/", UGID: provUser, Role: "PVEAdmin"},
			{Path: "/", UGID: provToken, Role: "BanlieueProvider"},
		}
	})
	info := infoFor(sim, providerFor(sim))
	info.Credentials = map[string][]byte{TokenIDKey: []byte(provToken), TokenSecretKey: []byte("f00dfeed-0000-4000-8000-000000000001")}
	return sim, info
}

func TestATokenWithTheDocumentedPrivilegesRunsAMachineLife(t *testing.T) {
	sim, info := startWithToken(t, providerPrivileges)
	cl, err := newDriver(sim).Connect(context.Background(), info)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
	s := cl.(*session)
	if _, err := s.Inventory(context.Background()); err != nil {
		t.Fatalf("Inventory: %v", err)
	}

	m := newMachine("6c1f8e1f-2d9b-4b63-8b66-1d4d1c2f1b02")
	m.Spec.Hardware = infrav1.MachineHardware{CPUs: 4, MemoryMiB: 4096}
	m.Spec.Disks[0].SizeGiB = proxmoxtest.TemplateDiskGiB + 5
	m.Spec.Interfaces = []infrav1.MachineInterface{{Name: "eth0", NetworkClass: "prod"}}
	if o := converge(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn {
		t.Fatalf("power state %s, want on", o.PowerState)
	}
	m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
	converge(t, s, m)
	vmid := theVM(t, sim).VMID
	deleteAll(t, s, m)
	if _, ok := sim.VM(vmid); ok {
		t.Errorf("VM %d still exists after Delete", vmid)
	}
}

func TestAMissingPrivilegeIsReportedByName(t *testing.T) {
	without := func(priv string) []string {
		return slices.DeleteFunc(slices.Clone(providerPrivileges), func(p string) bool { return p == priv })
	}
	t.Run("without Sys.Audit the credentials are not valid for the Provider", func(t *testing.T) {
		sim, info := startWithToken(t, without("Sys.Audit"))
		_, err := newDriver(sim).Connect(context.Background(), info)
		var unauth *providersdk.UnauthorizedError
		if !errors.As(err, &unauth) || !strings.Contains(err.Error(), "they lack Sys.Audit on /, which the provider needs") {
			t.Fatalf("Connect = %v, want rejected credentials naming Sys.Audit on /", err)
		}
		if providersdk.IsPermanent(err) {
			t.Errorf("Connect's error is also Permanent, so the SDK might read it as such: %v", err)
		}
	})

	for _, tt := range []struct {
		missing string
		want    string
	}{
		// PVE's clone check names no privilege when neither the VMID nor the pool
		// grants VM.Allocate; the provider says what the clone needs.
		{missing: "VM.Allocate", want: "it needs VM.Clone on /vms/9000 and VM.Allocate on the new VM's /vms/<vmid>"},
		{missing: "VM.Clone", want: "it lacks VM.Clone on /vms/9000 (Proxmox VE: Permission check failed (/vms/9000, VM.Clone))"},
		{missing: "Datastore.AllocateSpace", want: "it lacks Datastore.AllocateSpace on /storage/local-lvm"},
		{missing: "VM.Config.CPU", want: "it lacks VM.Config.CPU on /vms/"},
	} {
		t.Run("without "+tt.missing+" the machine says so", func(t *testing.T) {
			sim, info := startWithToken(t, without(tt.missing))
			cl, err := newDriver(sim).Connect(context.Background(), info)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
			m := newMachine("7d2a9f2a-3e0c-4c74-9c77-2e5e2d3a2c03")
			m.Spec.Hardware.CPUs = 4 // a config change after the clone
			_, err = reconcile(t, cl.(*session), m)
			// Retryable, not Permanent: granting the privilege on PVE lifts it, and
			// nothing about the machine changes then.
			var retry *providersdk.RetryableError
			if !errors.As(err, &retry) || providersdk.IsPermanent(err) || retry.Reason != infrav1.MachinePermissionDeniedReason || !strings.Contains(retry.Message, tt.want) {
				t.Fatalf("reconcile = %v, want a retryable PermissionDenied saying %q", err, tt.want)
			}
		})
	}
}
