package host

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRenderDomain(t *testing.T) {
	tests := []struct {
		name string
		spec DomainSpec
		want Domain
	}{
		{
			name: "two disks, a seed and NICs on a network and a bridge, with Secure Boot",
			spec: DomainSpec{
				Name: "team-a-web-1", UUID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Type: "kvm", Arch: "x86_64", MachineType: "q35",
				CPUs: 2, MemoryMiB: 2048, EFI: true, SecureBoot: true,
				Disks: []Disk{{Volume: VolumeRef{"default", "u-root.qcow2"}, Format: "qcow2"}, {Volume: VolumeRef{"fast", "u-data.qcow2"}, Format: "qcow2"}},
				Seed:  &VolumeRef{"default", "u-cidata.iso"},
				NICs:  []NIC{{Network: "lan"}, {Bridge: "br0", MTU: 9000}},
				Metadata: &Metadata{UID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Namespace: "team-a", Name: "web-1",
					Volumes: []string{"default/u-root.qcow2"}},
			},
			want: Domain{
				Name: "team-a-web-1", UUID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Arch: "x86_64", CPUs: 2, MaxCPUs: 2, MemoryMiB: 2048, NVRAM: true, EFI: true,
				Metadata: &Metadata{UID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Namespace: "team-a", Name: "web-1",
					Volumes: []string{"default/u-root.qcow2"}},
				Disks:       []VolumeRef{{"default", "u-root.qcow2"}, {"fast", "u-data.qcow2"}},
				DiskDevices: 2,
				Networks:    []string{"lan"},
			},
		},
		{
			name: "BIOS, no disks, no NICs, on the test driver",
			spec: DomainSpec{Name: "n", UUID: "u", Type: "test", CPUs: 1, MemoryMiB: 64, Metadata: &Metadata{UID: "u"}},
			want: Domain{Name: "n", UUID: "u", CPUs: 1, MaxCPUs: 1, MemoryMiB: 64, Metadata: &Metadata{UID: "u"}},
		},
		{
			name: "CPU and memory hotplug: the maxima, 16 slots and a NUMA cell",
			spec: DomainSpec{Name: "n", UUID: "u", Type: "kvm", Arch: "x86_64", CPUs: 2, MaxCPUs: 8, MemoryMiB: 1024, MaxMemoryMiB: 4096, MemorySlots: 16,
				Metadata: &Metadata{UID: "u", Hotplug: []string{"cpu", "memory"}}},
			want: Domain{Name: "n", UUID: "u", Arch: "x86_64", CPUs: 2, MaxCPUs: 8, MemoryMiB: 1024, MaxMemoryMiB: 4096, MemorySlots: 16, NUMACells: 1,
				Metadata: &Metadata{UID: "u", Hotplug: []string{"cpu", "memory"}}},
		},
		{
			name: "CPU hotplug only: no maxMemory, no NUMA cell",
			spec: DomainSpec{Name: "n", UUID: "u", Type: "kvm", CPUs: 2, MaxCPUs: 8, MemoryMiB: 1024},
			want: Domain{Name: "n", UUID: "u", CPUs: 2, MaxCPUs: 8, MemoryMiB: 1024},
		},
		{
			name: "no metadata",
			spec: DomainSpec{Name: "n", UUID: "u", Type: "test", CPUs: 1, MemoryMiB: 64},
			want: Domain{Name: "n", UUID: "u", CPUs: 1, MaxCPUs: 1, MemoryMiB: 64},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := renderDomain(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseDomain(x)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tt.want, got, cmpopts.IgnoreUnexported(Domain{}), cmpopts.IgnoreFields(Metadata{}, "XMLName")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStripMetadata(t *testing.T) {
	own := Metadata{UID: "u", Volumes: []string{"p/v"}}.marshal()
	other := `<app:x xmlns:app="https://example.com/app">keep</app:x>`
	if got := stripMetadata(other + own); got != other {
		t.Errorf("got %q, want %q", got, other)
	}
	if m := findMetadata(other + replaceMetadata(nil, Metadata{UID: "v"})); m == nil || m.UID != "v" {
		t.Errorf("replaced metadata = %+v", m)
	}
}

// FuzzDomainRoundTrip checks that what banlieue writes into a domain's XML (names,
// identity, hardware, volumes) reads back unchanged, whatever the machine's names hold.
func FuzzDomainRoundTrip(f *testing.F) {
	f.Add("team-a-web-1", "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", "team-a", "web-1", "default", "vol.qcow2", uint16(2), uint32(2048))
	f.Add("a<b>&\"c'", "", "ns", "</banlieue:machine>", "p", "v", uint16(1), uint32(1))
	f.Add("ü", "x", "\x00", "]]>", "", "", uint16(0), uint32(0))
	f.Fuzz(func(t *testing.T, name, uid, ns, mname, pool, vol string, cpus uint16, mem uint32) {
		spec := DomainSpec{
			Name: name, UUID: uid, Type: "kvm", Arch: "x86_64", CPUs: uint(cpus), MemoryMiB: uint(mem),
			Disks:    []Disk{{Volume: VolumeRef{pool, vol}, Format: "qcow2"}},
			Metadata: &Metadata{UID: uid, Namespace: ns, Name: mname, Volumes: []string{pool + "/" + vol}},
		}
		x, err := renderDomain(spec)
		if err != nil {
			return // encoding/xml refuses some strings (e.g. invalid UTF-8); nothing is written
		}
		got, err := parseDomain(x)
		if err != nil {
			if validXMLText(name, uid, ns, mname, pool, vol) {
				t.Fatalf("the built XML does not parse: %v\n%s", err, x)
			}
			return
		}
		if !validXMLText(name, uid, ns, mname, pool, vol) {
			return
		}
		if got.Metadata == nil {
			t.Fatalf("metadata lost:\n%s", x)
		}
		if diff := cmp.Diff(*spec.Metadata, *got.Metadata, cmpopts.IgnoreFields(Metadata{}, "XMLName")); diff != "" {
			t.Errorf("metadata (-want +got):\n%s", diff)
		}
		if got.Name != name || got.UUID != uid || got.CPUs != uint(cpus) || got.MemoryMiB != uint(mem) {
			t.Errorf("got name %q uuid %q cpus %d memory %d", got.Name, got.UUID, got.CPUs, got.MemoryMiB)
		}
	})
}

// validXMLText reports whether every string is made of characters XML 1.0 allows,
// with no leading or trailing space for encoding/xml to keep (it keeps them).
func validXMLText(ss ...string) bool {
	for _, s := range ss {
		for _, r := range s {
			if r == 0xFFFD || r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r > 0x10FFFF || r >= 0xD800 && r <= 0xDFFF || r == 0xFFFE || r == 0xFFFF {
				return false
			}
			if r == '\r' || r == '\t' || r == '\n' {
				return false // attribute values normalize whitespace
			}
		}
	}
	return true
}
