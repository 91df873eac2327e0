package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// BootNamespace is the XML namespace of the element that carries a running domain's
// boot ID in its live-only metadata.
const BootNamespace = "https://banlieue.io/xmlns/libvirt/boot/v1alpha1"

// MarkBoot gives the running domain d's current boot a new random ID, written to its
// live definition only (AFFECT_LIVE): libvirt keeps it while the QEMU process runs,
// across restarts of libvirtd (the live definition is saved with the domain's run
// state), and drops it with the live definition when the domain stops, so a new boot
// never carries an old ID. The domain's ID (virDomainGetID) is not enough: libvirt
// numbers domains from a counter that a restarted libvirtd does not keep (it carries on
// from the highest ID still running), so a boot after the restart can have the ID of
// an earlier, stopped one. It returns the ID written.
func (c *Client) MarkBoot(ctx context.Context, d *Domain) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to make a boot ID: %w", err)
	}
	id := hex.EncodeToString(b)
	err := c.do(ctx, "MarkBoot", "record the boot of domain "+d.Name, func(l *libvirt.Libvirt) error {
		return l.DomainSetMetadata(d.ref, int32(libvirt.DomainMetadataElement),
			libvirt.OptString{fmt.Sprintf(`<boot id=%q/>`, id)}, libvirt.OptString{"banlieue-boot"}, libvirt.OptString{BootNamespace},
			libvirt.DomainAffectLive)
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// findBootID finds the boot ID among a domain's metadata elements; "" when there is none.
func findBootID(inner string) string {
	dec := xml.NewDecoder(strings.NewReader(inner))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Space != BootNamespace || se.Name.Local != "boot" {
			continue
		}
		for _, a := range se.Attr {
			if a.Name.Local == "id" {
				return a.Value
			}
		}
		return ""
	}
}
