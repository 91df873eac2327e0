package nocloud

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readISO returns the files in an ISO image's root, as text, and its volume label.
func readISO(tb testing.TB, data []byte) (map[string]string, string) {
	tb.Helper()
	files, label, err := ReadISO(data)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for name, body := range files {
		out[name] = string(body)
	}
	return out, label
}

func TestBuildISO(t *testing.T) {
	tests := []struct {
		name string
		seed Seed
		want map[string]string
	}{
		{
			name: "cloud-config user data and a plain host name",
			seed: Seed{UserData: []byte("#cloud-config\nhostname: web-1\n"), InstanceID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Hostname: "web-1"},
			want: map[string]string{
				"user-data": "#cloud-config\nhostname: web-1\n",
				"meta-data": "instance-id: \"0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f\"\nlocal-hostname: \"web-1\"\n",
			},
		},
		{
			name: "empty user data and a host name that tries to add a key",
			seed: Seed{InstanceID: "uid", Hostname: "evil\"\nroot: true"},
			want: map[string]string{
				"user-data": "",
				"meta-data": "instance-id: \"uid\"\nlocal-hostname: \"evil\\\"\\x0aroot: true\"\n",
			},
		},
		{
			name: "a network configuration is a network-config file",
			seed: Seed{UserData: []byte("#cloud-config\n"), InstanceID: "uid", Hostname: "db", NetworkConfig: []byte("version: 2\n")},
			want: map[string]string{
				"user-data":      "#cloud-config\n",
				"meta-data":      "instance-id: \"uid\"\nlocal-hostname: \"db\"\n",
				"network-config": "version: 2\n",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.seed.BuildISO()
			if err != nil {
				t.Fatal(err)
			}
			got, label := readISO(t, data)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if label != VolumeLabel {
				t.Errorf("label = %q, want %q", label, VolumeLabel)
			}
		})
	}
}

func TestDigest(t *testing.T) {
	base := Seed{UserData: []byte("#cloud-config\n"), InstanceID: "uid", Hostname: "web"}
	withNetwork := base
	withNetwork.NetworkConfig = []byte("version: 2\n")
	otherUserData := base
	otherUserData.UserData = []byte("#cloud-config\npackages: [nginx]\n")
	// The user data's end moved into the host name: the same bytes in a row, another seed.
	shifted := Seed{UserData: []byte("#cloud-config"), InstanceID: "uid", Hostname: "\nweb"}
	tests := []struct {
		name  string
		a, b  Seed
		equal bool
	}{
		{name: "the same seed has the same digest", a: base, b: base, equal: true},
		{name: "other user data is another digest", a: base, b: otherUserData},
		{name: "a network configuration is another digest", a: base, b: withNetwork},
		{name: "bytes moved from one file to another are another digest", a: base, b: shifted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Digest() == tt.b.Digest(); got != tt.equal {
				t.Errorf("digests equal = %v, want %v", got, tt.equal)
			}
		})
	}
}

func TestHostname(t *testing.T) {
	long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 192) // 253 characters, one label
	tests := []struct{ name, machine, want string }{
		{name: "a short name is the host name as it is", machine: "web-1", want: "web-1"},
		{name: "a name with dots is a host name and a domain", machine: "web-1.prod", want: "web-1.prod"},
		{name: "a 253-character label is cut to one DNS label", machine: long, want: strings.Repeat("a", 60) + "-bb"},
		{name: "a long label after a dot makes the whole name one DNS label", machine: "web." + long, want: "web-" + strings.Repeat("a", 59)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Hostname(tt.machine); got != tt.want {
				t.Errorf("Hostname(%q) = %q, want %q", tt.machine, got, tt.want)
			}
		})
	}
}

// FuzzBuildISO checks that any user data comes back byte for byte.
func FuzzBuildISO(f *testing.F) {
	f.Add([]byte("#cloud-config\n"), "uid-1", "host")
	f.Add([]byte{}, "", "")
	f.Add(bytes.Repeat([]byte{0xff, 0}, 5000), "ü\x00", "a\nb")
	f.Fuzz(func(t *testing.T, userData []byte, id, host string) {
		data, err := Seed{UserData: userData, InstanceID: id, Hostname: host}.BuildISO()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := readISO(t, data)
		if got[UserDataFile] != string(userData) {
			t.Errorf("user-data differs: %d bytes in, %d out", len(userData), len(got[UserDataFile]))
		}
	})
}
