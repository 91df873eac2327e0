package libvirt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestQEMUFirmware(t *testing.T) {
	d := daemon(t)
	// TCG: a guest with no OS under OVMF trips some nested KVMs (the hypervisor pauses
	// it), and only TCG is sure to have the SMM that Secure Boot needs.
	s := connect(t, d.QEMUURI(), map[string]string{ParamDomainType: "qemu"})
	tests := []struct {
		name      string
		firmware  banlieuev1.Firmware
		wantNVRAM bool
	}{
		{name: "BIOS needs no NVRAM", firmware: banlieuev1.FirmwareBIOS},
		{name: "UEFI gets its variables in NVRAM", firmware: banlieuev1.FirmwareEFI, wantNVRAM: true},
		{name: "UEFI with Secure Boot gets enrolled keys in NVRAM", firmware: banlieuev1.FirmwareEFISecure, wantNVRAM: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			m := machine("fw-"+string(tt.firmware), func(m *providersdk.Machine) {
				m.Spec.Hardware.Firmware = tt.firmware
				m.Spec.Interfaces = nil
			})
			t.Cleanup(func() { _ = deleteMachine(context.WithoutCancel(ctx), s, m) })
			if err := createMachine(ctx, s, m); err != nil {
				if tt.firmware == banlieuev1.FirmwareEFISecure && strings.Contains(err.Error(), "System Management Mode not supported") {
					// Secure Boot firmware needs SMM, which some nested KVMs lack (TCG has it).
					t.Skipf("this host's KVM has no SMM: %v", err)
				}
				t.Fatalf("create: %v", err)
			}
			if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn {
				t.Errorf("power %s, want PoweredOn", o.PowerState)
			}
			nvram := ""
			inspect(t, d, func(l *libvirt.Libvirt) {
				x := domainXML(t, l, "team-a."+m.Name)
				if got := x.OS != nil && (x.OS.NVRam != nil || x.OS.Firmware == "efi"); got != tt.wantNVRAM {
					t.Errorf("NVRAM %v, want %v", got, tt.wantNVRAM)
				}
			})
			matches, _ := filepath.Glob(filepath.Join(d.Dir, "lib", "qemu", "nvram", "team-a."+m.Name+"_VARS.fd"))
			if len(matches) > 0 {
				nvram = matches[0]
			}
			if (nvram != "") != tt.wantNVRAM {
				t.Errorf("NVRAM file %q, want one: %v", nvram, tt.wantNVRAM)
			}
			if err := deleteMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
			if nvram != "" {
				if _, err := os.Stat(nvram); !os.IsNotExist(err) {
					t.Errorf("NVRAM file %s survived the deletion", nvram)
				}
			}
		})
	}
}
