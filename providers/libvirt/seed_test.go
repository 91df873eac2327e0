package libvirt

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/google/go-cmp/cmp"
)

// readISO returns the files in an ISO image's root and its volume label.
func readISO(tb testing.TB, data []byte) (map[string]string, string) {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "read.iso")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	b, err := file.OpenFromPath(p, true)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	fs, err := iso9660.Read(b, int64(len(data)), 0, 2048)
	if err != nil {
		tb.Fatalf("not an ISO 9660 image: %v", err)
	}
	entries, err := fs.ReadDir(".")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		f, err := fs.OpenFile(e.Name(), os.O_RDONLY)
		if err != nil {
			tb.Fatal(err)
		}
		body, err := io.ReadAll(f)
		if err != nil {
			tb.Fatal(err)
		}
		out[e.Name()] = string(body)
	}
	return out, strings.TrimRight(fs.Label(), " ")
}

func TestBuildSeedISO(t *testing.T) {
	tests := []struct {
		name string
		seed seed
		want map[string]string
	}{
		{
			name: "cloud-config user data and a plain host name",
			seed: seed{userData: []byte("#cloud-config\nhostname: web-1\n"), instanceID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", hostname: "web-1"},
			want: map[string]string{
				"user-data": "#cloud-config\nhostname: web-1\n",
				"meta-data": "instance-id: \"0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f\"\nlocal-hostname: \"web-1\"\n",
			},
		},
		{
			name: "empty user data and a host name that tries to add a key",
			seed: seed{instanceID: "uid", hostname: "evil\"\nroot: true"},
			want: map[string]string{
				"user-data": "",
				"meta-data": "instance-id: \"uid\"\nlocal-hostname: \"evil\\\"\\x0aroot: true\"\n",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := buildSeedISO(tt.seed)
			if err != nil {
				t.Fatal(err)
			}
			got, label := readISO(t, data)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if label != seedVolumeLabel {
				t.Errorf("label = %q, want %q", label, seedVolumeLabel)
			}
		})
	}
}

func TestGuestHostname(t *testing.T) {
	long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 192) // 253 characters, one label
	tests := []struct{ name, machine, want string }{
		{name: "a short name is the host name as it is", machine: "web-1", want: "web-1"},
		{name: "a name with dots is a host name and a domain", machine: "web-1.prod", want: "web-1.prod"},
		{name: "a 253-character label is cut to one DNS label", machine: long, want: strings.Repeat("a", 60) + "-bb"},
		{name: "a long label after a dot makes the whole name one DNS label", machine: "web." + long, want: "web-" + strings.Repeat("a", 59)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := guestHostname(tt.machine); got != tt.want {
				t.Errorf("guestHostname(%q) = %q, want %q", tt.machine, got, tt.want)
			}
		})
	}
}

// FuzzBuildSeedISO checks that any user data comes back byte for byte.
func FuzzBuildSeedISO(f *testing.F) {
	f.Add([]byte("#cloud-config\n"), "uid-1", "host")
	f.Add([]byte{}, "", "")
	f.Add(bytes.Repeat([]byte{0xff, 0}, 5000), "ü\x00", "a\nb")
	f.Fuzz(func(t *testing.T, userData []byte, id, host string) {
		data, err := buildSeedISO(seed{userData: userData, instanceID: id, hostname: host})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := readISO(t, data)
		if got[seedUserData] != string(userData) {
			t.Errorf("user-data differs: %d bytes in, %d out", len(userData), len(got[seedUserData]))
		}
	})
}
