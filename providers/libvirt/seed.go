package libvirt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Names of cloud-init's NoCloud data source.
const (
	// seedVolumeLabel is the ISO volume label cloud-init's NoCloud data source looks for.
	seedVolumeLabel = "cidata"
	seedUserData    = "user-data"
	seedMetaData    = "meta-data"
)

// seed is what a machine's NoCloud seed carries.
type seed struct {
	userData   []byte
	instanceID string
	hostname   string
}

// metaData renders the seed's meta-data: YAML with the instance ID (the machine's UID,
// so cloud-init runs its first boot once per machine) and the host name. Both are
// quoted, so no value can add keys.
func (s seed) metaData() []byte {
	return fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", yamlQuote(s.instanceID), yamlQuote(s.hostname))
}

// guestHostname is the guest's host name for a machine name: the name itself while each
// of its dot-separated labels fits in a DNS label's 63 characters, which is what a guest
// can take (cloud-init sets the first label as the host name, the whole as the FQDN);
// else the name made one DNS label of 63 characters.
func guestHostname(name string) string {
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

// buildSeedISO makes the NoCloud seed ISO in process: ISO 9660 with Rock Ridge and
// Joliet (so every guest sees the lowercase names with their dashes), labelled cidata.
// go-diskfs builds in a scratch directory, removed afterwards.
func buildSeedISO(s seed) ([]byte, error) {
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
	// The image is sized for the files plus ISO 9660's descriptors, path tables and
	// Rock Ridge and Joliet records; Finalize writes only what it needs.
	size := int64(len(s.userData)) + 1<<20
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
	for _, f := range []struct {
		name string
		data []byte
	}{{seedUserData, s.userData}, {seedMetaData, s.metaData()}} {
		w, err := fs.OpenFile(f.name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.name, err)
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.name, err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("failed to add %s to the seed ISO: %w", f.name, err)
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: seedVolumeLabel}); err != nil {
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
