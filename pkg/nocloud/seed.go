package nocloud

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Names of cloud-init's NoCloud data source.
const (
	// VolumeLabel is the ISO volume label cloud-init's NoCloud data source looks for.
	VolumeLabel = "cidata"
	// UserDataFile is the file holding the user data.
	UserDataFile = "user-data"
	// MetaDataFile is the file holding the instance ID and host name.
	MetaDataFile = "meta-data"
	// NetworkConfigFile is the file holding the network configuration.
	NetworkConfigFile = "network-config"
)

// Seed is what a machine's NoCloud seed carries.
type Seed struct {
	// UserData is the user data as the machine gives it, byte for byte.
	UserData []byte
	// InstanceID is the instance ID: the machine's UID, so that cloud-init runs its
	// first boot once per machine.
	InstanceID string
	// Hostname is the guest's host name (see Hostname).
	Hostname string
	// NetworkConfig is the network-config file's content (see NetworkConfig); none
	// when empty, and cloud-init then configures the first NIC by DHCP.
	NetworkConfig []byte
}

// File is one file of a seed.
type File struct {
	Name string
	Data []byte
}

// MetaData renders the seed's meta-data: YAML with the instance ID and the host name.
// Both are quoted, so no value can add keys.
func (s Seed) MetaData() []byte {
	return fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", yamlQuote(s.InstanceID), yamlQuote(s.Hostname))
}

// Files are the files the seed's ISO holds: user-data, meta-data and, when the seed
// has a network configuration, network-config.
func (s Seed) Files() []File {
	files := []File{{UserDataFile, s.UserData}, {MetaDataFile, s.MetaData()}}
	if len(s.NetworkConfig) > 0 {
		files = append(files, File{NetworkConfigFile, s.NetworkConfig})
	}
	return files
}

// Digest is the SHA-256 of the seed's files, in hex: equal seeds have equal digests,
// whereas two ISOs of one seed differ in their timestamps.
func (s Seed) Digest() string {
	h := sha256.New()
	for _, f := range s.Files() {
		// Each name and length is written before the data, so no two seeds run together.
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Hostname is the guest's host name for a machine name: the name itself while each of
// its dot-separated labels fits in a DNS label's 63 characters, which is what a guest
// can take (cloud-init sets the first label as the host name, the whole as the FQDN);
// else the name made one DNS label of 63 characters.
func Hostname(name string) string {
	for _, label := range strings.Split(name, ".") {
		if len(label) > 63 {
			return providersdk.DNSLabel(strings.ReplaceAll(name, ".", "-"), "localhost")
		}
	}
	return name
}

// yamlQuote returns s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// BuildISO makes the seed's ISO in process: ISO 9660 with Rock Ridge and Joliet (so
// every guest sees the lowercase names with their dashes), labelled cidata. go-diskfs
// builds in a scratch directory, removed afterwards.
func (s Seed) BuildISO() ([]byte, error) {
	dir, err := os.MkdirTemp("", "banlieue-seed-")
	if err != nil {
		return nil, fmt.Errorf("failed to make a scratch directory for the seed ISO: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	workspace := filepath.Join(dir, "workspace")
	if err := os.Mkdir(workspace, 0o700); err != nil {
		return nil, fmt.Errorf("failed to make a scratch directory for the seed ISO: %w", err)
	}
	isoPath := filepath.Join(dir, "seed.iso")
	files := s.Files()
	// The image is sized for the files plus ISO 9660's descriptors, path tables and
	// Rock Ridge and Joliet records; Finalize writes only what it needs.
	size := int64(1 << 20)
	for _, f := range files {
		size += int64(len(f.Data))
	}
	size += 2048 - size%2048
	b, err := file.CreateFromPath(isoPath, size)
	if err != nil {
		return nil, fmt.Errorf("failed to create the seed ISO: %w", err)
	}
	defer func() { _ = b.Close() }()
	fs, err := iso9660.Create(b, size, 0, 2048, workspace)
	if err != nil {
		return nil, fmt.Errorf("failed to create the seed ISO: %w", err)
	}
	for _, f := range files {
		w, err := fs.OpenFile(f.Name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.Name, err)
		}
		if _, err := w.Write(f.Data); err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.Name, err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.Name, err)
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: VolumeLabel}); err != nil {
		return nil, fmt.Errorf("failed to write the seed ISO: %w", err)
	}
	if err := b.Close(); err != nil {
		return nil, fmt.Errorf("failed to write the seed ISO: %w", err)
	}
	data, err := os.ReadFile(isoPath) //nolint:gosec // the ISO this function just built in its own scratch directory
	if err != nil {
		return nil, fmt.Errorf("failed to read the seed ISO: %w", err)
	}
	padIdentifiers(data)
	return data, nil
}

// padIdentifiers pads the primary volume descriptor's system and volume identifiers
// with spaces, as ISO 9660 requires: go-diskfs pads them with NULs, which some readers
// keep as part of the label, and cloud-init finds its seed by the label.
func padIdentifiers(iso []byte) {
	const pvd = 16 * 2048 // the first volume descriptor, always the primary one here
	if len(iso) < pvd+72 || iso[pvd] != 1 || string(iso[pvd+1:pvd+6]) != "CD001" {
		return
	}
	for i := pvd + 8; i < pvd+72; i++ {
		if iso[i] == 0 {
			iso[i] = ' '
		}
	}
}

// ReadISO reads an ISO 9660 image back: the files in its root, by name, and its volume
// label. It is BuildISO's inverse, for tests and for checking what a backend stored.
func ReadISO(iso []byte) (map[string][]byte, string, error) {
	dir, err := os.MkdirTemp("", "banlieue-seed-read-")
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p := filepath.Join(dir, "read.iso")
	if err := os.WriteFile(p, iso, 0o600); err != nil {
		return nil, "", err
	}
	b, err := file.OpenFromPath(p, true)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = b.Close() }()
	fs, err := iso9660.Read(b, int64(len(iso)), 0, 2048)
	if err != nil {
		return nil, "", fmt.Errorf("not an ISO 9660 image: %w", err)
	}
	entries, err := fs.ReadDir(".")
	if err != nil {
		return nil, "", err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		f, err := fs.OpenFile(e.Name(), os.O_RDONLY)
		if err != nil {
			return nil, "", err
		}
		body, err := io.ReadAll(f)
		if err != nil {
			return nil, "", err
		}
		out[e.Name()] = body
	}
	return out, strings.TrimRight(fs.Label(), " "), nil
}
