package host

import (
	"testing"

	"libvirt.org/go/libvirtxml"
)

// capsWith returns host capabilities with one hvm guest of arch and domain types.
func capsWith(arch string, types ...string) *libvirtxml.Caps {
	g := libvirtxml.CapsGuest{OSType: "hvm", Arch: libvirtxml.CapsGuestArch{Name: arch}}
	for _, t := range types {
		g.Arch.Domains = append(g.Arch.Domains, libvirtxml.CapsGuestDomain{Type: t})
	}
	return &libvirtxml.Caps{Host: libvirtxml.CapsHost{CPU: &libvirtxml.CapsHostCPU{Arch: arch}}, Guests: []libvirtxml.CapsGuest{g}}
}

func TestGuestType(t *testing.T) {
	// Covered against real capabilities by the driver's TestInventory; here the choice
	// between them.
	tests := []struct {
		name     string
		domains  []string
		only     string
		wantType string
	}{
		{name: "KVM is preferred over TCG", domains: []string{"qemu", "kvm"}, wantType: "kvm"},
		{name: "TCG when there is no KVM", domains: []string{"qemu"}, wantType: "qemu"},
		{name: "TCG when the Provider's domainType asks for it", domains: []string{"qemu", "kvm"}, only: "qemu", wantType: "qemu"},
		{name: "the test driver's own type otherwise", domains: []string{"test"}, wantType: "test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := capsWith("x86_64", tt.domains...)
			arch, typ := guestType(caps, tt.only)
			if arch != "x86_64" || typ != tt.wantType {
				t.Errorf("got %s/%s, want x86_64/%s", arch, typ, tt.wantType)
			}
		})
	}
}
