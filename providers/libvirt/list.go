package libvirt

import (
	"context"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

var _ providersdk.VMLister = (*session)(nil)

// ListVMs returns the host's domains, running or not, that carry no machine's mark
// (banlieue's metadata element naming a machine, as ListMarked reads it), each with its
// provider ID, power state and shape as Observe of a machine adopting it reports them
// (adoptedHardware: the sizes of its pool volumes, all 0 when some disk is a file or a
// block device) and its firmware, UEFI or BIOS. libvirt has no templates, and the
// Provider is one host, so every such domain is listed, with no location.
//
// Over one connection it lists the domains once and reads each one's XML; for each
// unmarked domain it then reads the state, managed save image and volume sizes, as
// FindDomain does. It never changes the host.
func (s *session) ListVMs(ctx context.Context) ([]providersdk.UnmanagedVM, error) {
	h, err := s.hostInfo(ctx)
	if err != nil {
		return nil, err
	}
	doms, err := s.host.Domains(ctx, func(d *host.Domain) bool { return !marked(d.Metadata) })
	if err != nil {
		return nil, err
	}
	out := make([]providersdk.UnmanagedVM, 0, len(doms))
	for _, d := range doms {
		fw := banlieuev1.FirmwareBIOS
		if d.EFI {
			fw = banlieuev1.FirmwareEFI
		}
		out = append(out, providersdk.UnmanagedVM{
			ProviderID: providerID(h, d.UUID),
			Name:       d.Name,
			PowerState: powerState(d),
			Hardware:   adoptedHardware(d),
			Firmware:   fw,
		})
	}
	return out, nil
}
