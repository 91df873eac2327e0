package proxmox

import (
	"context"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

var _ providersdk.VMLister = (*session)(nil)

// ListVMs returns the cluster's VMs within the Provider's nodes and pool (inScope, as
// an adopting machine's Observe bounds them) that are not templates and carry no
// machine's mark, with their shape as Observe of a machine adopting them reads it.
//
// It makes one call of the guest listing (/cluster/resources), which finds the VMs and
// leaves out templates, VMs outside the Provider's scope and those with a machine's tag
// (the test ListMarked makes), and then reads the config of each VM left: the listing
// has neither the sizes of every disk (its maxdisk is the boot disk's) nor the
// firmware, and its names lag behind for up to 10 seconds (see unreported). That is 1 +
// N calls for the N VMs returned, none for the others; the config also shows a machine's
// UID in the description of a VM without the tag, which is left out too. The power state
// is the listing's (running or stopped; a paused VM is listed running, a hibernated one
// is Suspended by its config's lock), "" before pvestatd first reports a new VM. A VM
// gone between the listing and the config read, or on a node that does not answer, is
// left out. It never changes the cluster.
func (s *session) ListVMs(ctx context.Context) ([]providersdk.UnmanagedVM, error) {
	all, err := s.api.Resources(ctx)
	if err != nil {
		return nil, err
	}
	var out []providersdk.UnmanagedVM
	for _, r := range all {
		if r.Template || !s.inScope(r) || markedUID(r.Tags) != "" {
			continue
		}
		conf, _, err := s.config(ctx, r.Node, r.VMID)
		switch {
		case pve.IsNodeUnreachable(err):
			continue
		case err != nil:
			return nil, err
		case conf == nil || conf["template"] == "1":
			continue
		case markedUID(conf["tags"]) != "" || descriptionUID(conf["description"]) != "":
			// Marked since the listing, or a UID in the description alone: Observe of an
			// adopting machine would not find it unclaimed.
			continue
		}
		out = append(out, providersdk.UnmanagedVM{
			ProviderID: s.providerID(r.VMID),
			Name:       conf["name"],
			Location:   vmLocation(r),
			PowerState: listedPower(r, conf),
			Hardware:   hardware(conf, conf.DiskKeys()),
			Firmware:   firmware(conf),
		})
	}
	return out, nil
}

// vmLocation is where a listed VM is, as UnmanagedVM.Location says it: its node, and
// "/<pool>" when it is in one.
func vmLocation(r pve.Resource) string {
	if r.Pool == "" {
		return r.Node
	}
	return r.Node + "/" + r.Pool
}

// listedPower is a VM's power state as the listing and its config tell it, without a
// call of its own: Suspended when hibernated (its config's lock, as powerState reads
// it), PoweredOn when listed running (paused included: only status/current tells), and
// PoweredOff when listed stopped; "" when the listing does not know yet.
func listedPower(r pve.Resource, conf pve.Config) banlieuev1.PowerState {
	switch {
	case conf["lock"] == "suspended":
		return banlieuev1.PowerStateSuspended
	case r.Status == "running":
		return banlieuev1.PowerStatePoweredOn
	case r.Status == "stopped":
		return banlieuev1.PowerStatePoweredOff
	}
	return ""
}

// firmware is a config's firmware: UEFI for bios=ovmf, else BIOS (SeaBIOS, PVE's
// default).
func firmware(conf pve.Config) banlieuev1.Firmware {
	if conf["bios"] == "ovmf" {
		return banlieuev1.FirmwareEFI
	}
	return banlieuev1.FirmwareBIOS
}
