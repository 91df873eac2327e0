package libvirt

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// errCrash stands for a provider killed at a stage of Create.
var errCrash = errors.New("provider killed")

func TestCrashMidCreate(t *testing.T) {
	d := daemon(t)
	tests := []struct {
		name  string
		stage string
	}{
		{name: "killed after the volumes were made, before the domain was defined", stage: "volumes"},
		{name: "killed after the domain was defined, before it was started", stage: "defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			m := machine("crash-" + tt.stage)
			crashing := connect(t, d.QEMUURI(), nil)
			crashing.driver.createHook = func(stage string) error {
				if stage == tt.stage {
					return errCrash
				}
				return nil
			}
			if _, err := crashing.Create(ctx, m, providersdk.Observation{}); !errors.Is(err, errCrash) {
				t.Fatalf("first create: %v, want the crash", err)
			}
			// A new process: a new driver and connection. Its Create is handed what an
			// Observe before the crash saw, nothing, so it finds what the crashed one made.
			s := connect(t, d.QEMUURI(), nil)
			if _, err := s.Create(ctx, m, providersdk.Observation{}); err != nil {
				t.Fatalf("create after the crash: %v", err)
			}
			if _, err := s.Update(ctx, m, mustObserve(t, s, m)); err != nil {
				t.Fatalf("update after the crash: %v", err)
			}
			o := mustObserve(t, s, m)
			if !o.Exists || o.PowerState != banlieuev1.PowerStatePoweredOn {
				t.Errorf("exists %v, power %s; want a running domain", o.Exists, o.PowerState)
			}
			inspect(t, d, func(l *libvirt.Libvirt) {
				if n := domainsNamed(t, l, "team-a."+m.Name); n != 1 {
					t.Errorf("%d domains, want 1", n)
				}
				got := machineVolumes(t, l, m)
				slices.Sort(got) // in the pool's order
				if diff := cmp.Diff([]string{string(m.UID) + "-cidata.iso", string(m.UID) + "-root.qcow2"}, got); diff != "" {
					t.Errorf("volumes (-want +got):\n%s", diff)
				}
			})
			if err := deleteMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDeleteAfterCrashBeforeDefine(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	m := machine("orphan")
	s := connect(t, d.QEMUURI(), nil)
	s.driver.createHook = func(string) error { return errCrash }
	if _, err := s.Create(ctx, m, providersdk.Observation{}); !errors.Is(err, errCrash) {
		t.Fatalf("create: %v", err)
	}
	if err := deleteMachine(ctx, s, m); err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		if vols := machineVolumes(t, l, m); len(vols) > 0 {
			t.Errorf("volumes left: %v", vols)
		}
	})
}

func TestIdentityMismatch(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	m := machine("impostor")
	s := connect(t, d.QEMUURI(), nil)
	// Someone defines a domain with the machine's UUID but without banlieue's metadata.
	x, err := (&libvirtxml.Domain{
		Type: "qemu", Name: "impostor", UUID: string(m.UID),
		Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		if _, err := l.DomainDefineXMLFlags(x, 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() {
		inspect(t, d, func(l *libvirt.Libvirt) {
			if dom, err := l.DomainLookupByName("impostor"); err == nil {
				_ = l.DomainUndefine(dom)
			}
		})
	})
	for name, call := range map[string]func() error{
		"observe": func() error { _, err := s.Observe(ctx, m); return err },
		"delete":  func() error { return deleteMachine(ctx, s, m) },
	} {
		var perm *providersdk.PermanentError
		if err := call(); !errors.As(err, &perm) || perm.Reason != infrav1.MachineIdentityMismatchReason {
			t.Errorf("%s: %v, want IdentityMismatch", name, err)
		}
	}
}

func TestOutage(t *testing.T) {
	d := libvirtd.StartT(t, libvirtd.Options{})
	if _, err := d.DefineDirPool(testPool); err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		if err := libvirtd.CreateBlankImageOn(l, testPool, testImage, testImageGiB); err != nil {
			t.Fatal(err)
		}
	})
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	m := machine("outage", func(m *providersdk.Machine) { m.Spec.Interfaces = nil })
	if err := createMachine(ctx, s, m); err != nil {
		t.Fatal(err)
	}
	booted := mustObserve(t, s, m).BootID
	if booted == "" {
		t.Fatal("the running domain reports no boot ID")
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByName(domainName(m.Namespace, m.Name))
		if err != nil {
			t.Fatal(err)
		}
		live, err := l.DomainGetXMLDesc(dom, 0)
		if err != nil {
			t.Fatal(err)
		}
		inactive, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(live, booted) || strings.Contains(inactive, host.BootNamespace) {
			t.Errorf("the boot ID %s is in the live definition: %v, in the persistent one: %v; want live only",
				booted, strings.Contains(live, booted), strings.Contains(inactive, host.BootNamespace))
		}
	})
	d.Kill()
	if _, err := s.Observe(ctx, m); !providersdk.IsUnreachable(err) {
		t.Fatalf("observe while libvirtd is down: %v, want Unreachable", err)
	}
	if _, err := s.Inventory(ctx); !providersdk.IsUnreachable(err) {
		t.Fatalf("inventory while libvirtd is down: %v, want Unreachable", err)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	var o providersdk.Observation
	eventually(t, 30*time.Second, func() error {
		var err error
		o, err = s.Observe(ctx, m)
		return err
	})
	if !o.Exists || o.PowerState != banlieuev1.PowerStatePoweredOn {
		t.Errorf("after restart: exists %v, power %s; want the domain still running", o.Exists, o.PowerState)
	}
	if o.BootID != booted {
		t.Errorf("boot ID after libvirtd restarted = %q, want %q: the domain kept running", o.BootID, booted)
	}
	if _, err := s.Delete(ctx, m, o); err != nil {
		t.Fatal(err)
	}
}
