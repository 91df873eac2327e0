package nocloud

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/banlieue/banlieue/internal/hostdeps"
)

// The witnesses of the seed that banlieue did not write: Debian's xorriso reads the ISO
// back, and Debian's cloud-init (unpacked, not installed, by hack/deps.sh) reads the
// seed's files as the NoCloud data source does on a guest.
const (
	xorriso = "/usr/bin/xorriso"
	// python3 is Debian's interpreter, whose dist-packages hold python3-yaml and
	// python3-configobj, which cloud-init imports.
	python3 = "/usr/bin/python3"
	// cloudInitScript reads a seed directory with cloud-init and prints what it read.
	cloudInitScript = "testdata/cloudinit_read.py"
)

// cloudInitPackages is the dist-packages directory of the cloud-init package that
// hack/deps.sh unpacks in the user's cache (os.UserCacheDir is its
// ${XDG_CACHE_HOME:-$HOME/.cache}).
func cloudInitPackages() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "banlieue", "cloud-init", "root", "usr", "lib", "python3", "dist-packages")
}

// witnessesMissing says why xorriso or cloud-init cannot run here, or "" when both can.
func witnessesMissing() string {
	const fix = "; run hack/deps.sh (as root to install xorriso, python3-yaml and python3-configobj; it unpacks cloud-init in the user's cache)"
	if _, err := os.Stat(xorriso); err != nil {
		return fmt.Sprintf("xorriso is missing (%v)%s", err, fix)
	}
	// -I: neither PYTHONPATH nor a user's site-packages stands in for Debian's packages;
	// the script puts the unpacked cloud-init first on its path itself.
	probe := "import sys; sys.path.insert(0, sys.argv[1]); from cloudinit.sources import DataSourceNoCloud; from cloudinit.net import eni"
	out, err := exec.Command(python3, "-I", "-c", probe, cloudInitPackages()).CombinedOutput()
	if err != nil {
		// The traceback's last line names the missing module.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Sprintf("%s cannot import cloud-init from %s (%v %s)%s", python3, cloudInitPackages(), err, lines[len(lines)-1], fix)
	}
	return ""
}

// xorrisoExtract extracts iso's files into a new directory, loading the given tree
// ("nojoliet" for Rock Ridge's, "norock" for Joliet's), and returns the directory, the
// tree xorriso says it loaded and the primary volume descriptor's volume ID.
func xorrisoExtract(t *testing.T, iso, tree string) (dir, loaded, volumeID string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), tree)
	out, err := exec.Command(xorriso, "-read_fs", tree, "-osirrox", "on", "-indev", iso,
		"-toc", "-pvd_info", "-extract", "/", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso -read_fs %s: %v\n%s", tree, err, out)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + ` *: (.*)$`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("xorriso printed no %q:\n%s", name, out)
		}
		return strings.TrimSpace(m[1])
	}
	return dir, field("ISO loaded"), field("Volume Id")
}

// cloudInitRead is what cloudInitScript prints.
type cloudInitRead struct {
	// SeedDir and SeedFrom are the seed as NoCloud reads a mounted cidata filesystem
	// and a seedfrom=file:// URL.
	SeedDir  ciSeed `json:"seed_dir"`
	SeedFrom ciSeed `json:"seedfrom"`
	// NetworkState is the network-config as cloud-init's network state holds it.
	NetworkState *struct {
		Interfaces []ciInterface    `json:"interfaces"`
		Routes     []map[string]any `json:"routes"`
	} `json:"network_state"`
	// ENI is the network state rendered as /etc/network/interfaces.
	ENI string `json:"eni"`
}

// ciSeed is a seed as cloud-init's NoCloud data source read it.
type ciSeed struct {
	InstanceID string         `json:"instance_id"`
	MetaData   map[string]any `json:"meta_data"`
	UserData   []byte         `json:"user_data"` // base64 in JSON
	// NetworkConfig is the network-config document, decoded; only from the seed_dir
	// reading, as seedfrom reads no network-config.
	NetworkConfig json.RawMessage `json:"network_config"`
}

// ciInterface is an interface of cloud-init's network state.
type ciInterface struct {
	Name    string `json:"name"`
	MAC     string `json:"mac_address"`
	MTU     int    `json:"mtu"`
	Subnets []struct {
		Type    string           `json:"type"`
		Address string           `json:"address"`
		Prefix  int              `json:"prefix"`
		Gateway string           `json:"gateway"`
		Routes  []map[string]any `json:"routes"`
	} `json:"subnets"`
	DNS struct {
		Nameservers []string `json:"nameservers"`
	} `json:"dns"`
}

// nic is what a guest makes of an interface, as the test compares it: from an
// Interface as banlieue means it, or from cloud-init's network state.
type nic struct {
	Name, MAC   string
	MTU         int
	DHCP4       bool
	Addresses   []string // CIDR
	Gateways    []string
	Nameservers []string
	// Routes are routes other than the default ones by gateway.
	Routes []map[string]any
}

// nicOf is the interface as the seed means it.
func nicOf(i Interface) nic {
	n := nic{Name: i.ID, MAC: strings.ToLower(i.MAC), MTU: i.MTU, DHCP4: i.DHCP, Nameservers: i.Nameservers}
	if !i.DHCP {
		n.Addresses = i.Addresses
		for _, gw := range []string{i.Gateway4, i.Gateway6} {
			if gw != "" {
				n.Gateways = append(n.Gateways, gw)
			}
		}
	}
	return n
}

// nicFromCloudInit is the interface as cloud-init's network state holds it.
func nicFromCloudInit(i ciInterface) nic {
	n := nic{Name: i.Name, MAC: i.MAC, MTU: i.MTU, Nameservers: i.DNS.Nameservers}
	for _, s := range i.Subnets {
		switch s.Type {
		case "dhcp4", "dhcp":
			n.DHCP4 = true
		case "static", "static6":
			a := s.Address + "?" // an address cloud-init mangled shows as such in the diff
			if addr, err := netip.ParseAddr(s.Address); err == nil {
				a = netip.PrefixFrom(addr, s.Prefix).String()
			}
			n.Addresses = append(n.Addresses, a)
		default:
			n.Addresses = append(n.Addresses, s.Type+"?") // a kind of subnet the seed never asks for
		}
		if s.Gateway != "" {
			n.Gateways = append(n.Gateways, s.Gateway)
		}
		n.Routes = append(n.Routes, s.Routes...)
	}
	return n
}

// TestCloudInitReadsTheSeed is the witness of readers banlieue did not write: xorriso
// finds the seed's volume ID and its files, by their names, in both its Rock Ridge and
// Joliet trees, and cloud-init's own NoCloud code reads from those files the instance
// ID, the host name and the user data byte for byte, and from the network-config each
// NIC, by its MAC, with its addresses, gateways, name servers and MTU, or DHCP.
func TestCloudInitReadsTheSeed(t *testing.T) {
	hostdeps.Require(t, witnessesMissing())
	tests := []struct {
		name   string
		seed   Seed
		ifaces []Interface
	}{
		{
			name: "user data and meta-data only",
			seed: Seed{UserData: []byte("#cloud-config\npackages: [nginx]\n"), InstanceID: "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", Hostname: "web-1"},
		},
		{
			// The MACs are upper case, as the Proxmox VE provider makes them (nocloud.MachineMACs).
			name: "a static NIC and a DHCP one, found by their MACs",
			seed: Seed{UserData: []byte("#cloud-config\n"), InstanceID: "3f2a9c4e-0000-4000-8000-000000000001", Hostname: "db.prod"},
			ifaces: []Interface{
				{ID: "net0", MAC: "02:AB:CD:EF:01:02", Addresses: []string{"192.0.2.10/24"}, Gateway4: "192.0.2.1",
					Nameservers: []string{"192.0.2.53", "198.51.100.53"}, MTU: 9000},
				{ID: "net1", MAC: "02:00:5E:00:00:01", DHCP: true, MTU: 1450},
			},
		},
		{
			name: "a dual-stack static NIC has both default gateways",
			seed: Seed{UserData: []byte("#!/bin/sh\necho hi\n"), InstanceID: "uid-dual", Hostname: "dual"},
			ifaces: []Interface{
				{ID: "net0", MAC: "02:00:00:00:00:02", Addresses: []string{"192.0.2.20/24", "2001:db8::20/64"}, Gateway4: "192.0.2.1", Gateway6: "2001:db8::1",
					Nameservers: []string{"2001:db8::53"}},
			},
		},
		{
			// Each value must stay one YAML scalar: no key may come out of it.
			name: "an instance ID and a host name that try to add keys stay one value each",
			seed: Seed{
				UserData:   []byte("#cloud-config\n\x00\xff not UTF-8\n"),
				InstanceID: `i-"1": x\nlocal-hostname: evil`,
				Hostname:   "h\": y\nroot: true # '\\x0a",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed := tt.seed
			seed.NetworkConfig = NetworkConfig(tt.ifaces)
			data, err := seed.BuildISO()
			if err != nil {
				t.Fatal(err)
			}
			iso := filepath.Join(t.TempDir(), "seed.iso")
			if err := os.WriteFile(iso, data, 0o600); err != nil {
				t.Fatal(err)
			}

			want := map[string]string{}
			for _, f := range seed.Files() {
				want[f.Name] = string(f.Data)
			}
			var dir string
			for _, tree := range []struct{ readFS, loaded string }{{"nojoliet", "Rock_Ridge"}, {"norock", "Joliet"}} {
				d, loaded, volumeID := xorrisoExtract(t, iso, tree.readFS)
				if loaded != tree.loaded || volumeID != VolumeLabel {
					t.Errorf("xorriso -read_fs %s loaded %q, volume ID %q; want %q, %q", tree.readFS, loaded, volumeID, tree.loaded, VolumeLabel)
				}
				if diff := cmp.Diff(want, readDir(t, d)); diff != "" {
					t.Errorf("files of the %s tree (-want +got):\n%s", tree.loaded, diff)
				}
				if dir == "" {
					dir = d // Linux guests read Rock Ridge's tree
				}
			}

			got := runCloudInit(t, dir)
			checkSeedRead(t, "the cidata filesystem", seed, got.SeedDir)
			checkSeedRead(t, "seedfrom=file://", seed, got.SeedFrom, "seedfrom")

			if len(tt.ifaces) == 0 {
				if string(got.SeedDir.NetworkConfig) != "null" || got.NetworkState != nil {
					t.Errorf("cloud-init read a network configuration from a seed without one: %s", got.SeedDir.NetworkConfig)
				}
				return
			}
			if got.NetworkState == nil {
				t.Fatal("cloud-init read no network configuration")
			}
			var wantNICs, gotNICs []nic
			for _, i := range tt.ifaces {
				wantNICs = append(wantNICs, nicOf(i))
			}
			for _, i := range got.NetworkState.Interfaces {
				gotNICs = append(gotNICs, nicFromCloudInit(i))
			}
			byName := func(a, b nic) int { return strings.Compare(a.Name, b.Name) }
			slices.SortFunc(gotNICs, byName)
			slices.SortFunc(wantNICs, byName)
			if diff := cmp.Diff(wantNICs, gotNICs); diff != "" {
				t.Errorf("interfaces as cloud-init's network state holds them (-want +got):\n%s", diff)
			}
			if len(got.NetworkState.Routes) > 0 {
				t.Errorf("cloud-init's network state has routes the seed did not ask for: %v", got.NetworkState.Routes)
			}
			// The ifupdown rendering, as a Debian guest gets it, configures each NIC.
			for _, n := range wantNICs {
				lines := []string{"hwaddress " + n.MAC}
				if n.DHCP4 {
					lines = append(lines, "iface "+n.Name+" inet dhcp")
				}
				for _, a := range n.Addresses {
					lines = append(lines, "address "+a)
				}
				for _, gw := range n.Gateways {
					lines = append(lines, "gateway "+gw)
				}
				if n.MTU != 0 {
					lines = append(lines, fmt.Sprintf("mtu %d", n.MTU))
				}
				for _, l := range lines {
					if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(l) + `$`).MatchString(got.ENI) {
						t.Errorf("cloud-init's /etc/network/interfaces has no line %q for %s:\n%s", l, n.Name, got.ENI)
					}
				}
			}
		})
	}
}

// checkSeedRead checks the instance ID, meta-data and user data that cloud-init read
// (how says where from) against the seed: the meta-data holds the seed's instance ID
// and host name and no other key but cloud-init's dsmode and the extra keys given.
func checkSeedRead(t *testing.T, how string, seed Seed, got ciSeed, extra ...string) {
	t.Helper()
	if got.InstanceID != seed.InstanceID {
		t.Errorf("from %s, cloud-init's instance ID is %q, want %q", how, got.InstanceID, seed.InstanceID)
	}
	wantMD := map[string]any{"instance-id": seed.InstanceID, "local-hostname": seed.Hostname, "dsmode": got.MetaData["dsmode"]}
	for _, k := range extra {
		wantMD[k] = got.MetaData[k]
	}
	if diff := cmp.Diff(wantMD, got.MetaData); diff != "" {
		t.Errorf("from %s, cloud-init's meta-data (-want +got):\n%s", how, diff)
	}
	if string(got.UserData) != string(seed.UserData) {
		t.Errorf("from %s, cloud-init's user data is %q, want %q", how, got.UserData, seed.UserData)
	}
}

// readDir returns the regular files of dir, by name, as text.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		body, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(body)
	}
	return out
}

// runCloudInit runs cloudInitScript on the seed directory dir.
func runCloudInit(t *testing.T, dir string) cloudInitRead {
	t.Helper()
	cmd := exec.Command(python3, "-I", cloudInitScript, cloudInitPackages(), dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", cloudInitScript, err, stderr.String())
	}
	var got cloudInitRead
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed no JSON: %v\n%s", cloudInitScript, err, out)
	}
	// What cloud-init read is long: it is shown only when the test fails.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cloud-init read the seed:\n%s", out)
		}
	})
	return got
}
