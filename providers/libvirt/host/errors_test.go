package host

import (
	"errors"
	"fmt"
	"testing"

	"github.com/digitalocean/go-libvirt"
)

func TestKVMRefused(t *testing.T) {
	// The messages as libvirt 9 returns them from virDomainCreate, QEMU's stderr
	// included; what the host cannot test for real on a machine whose KVM works.
	tests := []struct {
		name string
		err  error
		want string // the quoted line; "" when the error is not a refusal of KVM
	}{
		{
			name: "QEMU as libvirt-qemu cannot open a /dev/kvm that is 0600 root",
			err: libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "internal error: process exited while connecting to monitor: " +
				"Could not access KVM kernel module: Permission denied\n2026-12-04T10:00:00.000000Z qemu-system-x86_64: failed to initialize kvm: Permission denied"},
			want: "Could not access KVM kernel module: Permission denied",
		},
		{
			name: "QEMU finds no /dev/kvm",
			err: libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "internal error: qemu unexpectedly closed the monitor: " +
				"2026-12-04T10:00:00.000000Z qemu-system-x86_64: failed to initialize kvm: No such file or directory"},
			want: "failed to initialize kvm: No such file or directory",
		},
		{
			name: "libvirt's own check before QEMU runs",
			err: libvirt.Error{Code: uint32(libvirt.ErrConfigUnsupported), Message: "unsupported configuration: Domain requires KVM, but it is not available. " +
				"Check that virtualization is enabled in the host BIOS, and host configuration is setup to load the kvm modules."},
			want: "Domain requires KVM, but it is not available. Check that virtualization is enabled in the host BIOS, and host configuration is setup to load the kvm modules.",
		},
		{
			name: "wrapped as the client wraps every failed call",
			err:  fmt.Errorf("failed to start domain a.b: %w", errors.New("Could not access KVM kernel module: No such device")),
			want: "Could not access KVM kernel module: No such device",
		},
		{
			name: "a disk that is missing is not about KVM",
			err:  libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "Cannot access storage file '/var/lib/x.qcow2': No such file or directory"},
		},
		{name: "no error", err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kvmRefused(tt.err)
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("kvmRefused = %q, want none", got.QEMU)
			case tt.want != "" && got == nil:
				t.Fatalf("kvmRefused = none, want %q", tt.want)
			case got != nil && got.QEMU != tt.want:
				t.Fatalf("kvmRefused quotes %q, want %q", got.QEMU, tt.want)
			case got != nil && !errors.Is(got, tt.err):
				t.Fatalf("the refusal does not wrap libvirt's error")
			}
		})
	}
}
