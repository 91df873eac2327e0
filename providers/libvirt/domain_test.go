package libvirt

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestBuildDomain(t *testing.T) {
	tests := []struct {
		name string
		spec domainSpec
		want observedDomain
	}{
		{
			name: "two disks, a seed and NICs on a network and a bridge, with Secure Boot",
			spec: domainSpec{
				name: "team-a-web-1", uuid: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", domainType: "kvm", arch: "x86_64", machineType: "q35",
				cpus: 2, memoryMiB: 2048, firmware: banlieuev1.FirmwareEFISecure,
				disks: []diskDevice{{vol: volumeRef{"default", "u-root.qcow2"}, format: "qcow2"}, {vol: volumeRef{"fast", "u-data.qcow2"}, format: "qcow2"}},
				seed:  &volumeRef{"default", "u-cidata.iso"},
				nics:  []nicDevice{{network: "lan"}, {bridge: "br0", mtu: 9000}},
				meta:  machineMetadata{UID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Namespace: "team-a", Name: "web-1", Volumes: []string{"default/u-root.qcow2"}},
			},
			want: observedDomain{
				name: "team-a-web-1", uuid: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", cpus: 2, memoryMiB: 2048, nvram: true,
				meta:     &machineMetadata{UID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Namespace: "team-a", Name: "web-1", Volumes: []string{"default/u-root.qcow2"}},
				disks:    []volumeRef{{"default", "u-root.qcow2"}, {"fast", "u-data.qcow2"}},
				networks: []string{"lan"},
			},
		},
		{
			name: "BIOS, no disks, no NICs, on the test driver",
			spec: domainSpec{name: "n", uuid: "u", domainType: "test", cpus: 1, memoryMiB: 64, meta: machineMetadata{UID: "u"}},
			want: observedDomain{name: "n", uuid: "u", cpus: 1, memoryMiB: 64, meta: &machineMetadata{UID: "u"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := buildDomain(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseDomain(x)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.meta.XMLName = got.meta.XMLName
			if diff := cmp.Diff(&tt.want, got, cmp.AllowUnexported(observedDomain{}, volumeRef{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestStripMetadata(t *testing.T) {
	own := machineMetadata{UID: "u", Volumes: []string{"p/v"}}.marshal()
	other := `<app:x xmlns:app="https://example.com/app">keep</app:x>`
	if got := stripMetadata(other + own); got != other {
		t.Errorf("got %q, want %q", got, other)
	}
	if m := findMetadata(other + replaceMetadata(nil, machineMetadata{UID: "v"})); m == nil || m.UID != "v" {
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
		spec := domainSpec{
			name: name, uuid: uid, domainType: "kvm", arch: "x86_64", cpus: uint(cpus), memoryMiB: uint(mem),
			disks: []diskDevice{{vol: volumeRef{pool, vol}, format: "qcow2"}},
			meta:  machineMetadata{UID: uid, Namespace: ns, Name: mname, Volumes: []string{pool + "/" + vol}},
		}
		x, err := buildDomain(spec)
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
		want := spec.meta
		if got.meta == nil {
			t.Fatalf("metadata lost:\n%s", x)
		}
		want.XMLName = got.meta.XMLName
		if diff := cmp.Diff(want, *got.meta); diff != "" {
			t.Errorf("metadata (-want +got):\n%s", diff)
		}
		if got.name != name || got.uuid != uid || got.cpus != uint(cpus) || got.memoryMiB != uint(mem) {
			t.Errorf("got name %q uuid %q cpus %d memory %d", got.name, got.uuid, got.cpus, got.memoryMiB)
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
