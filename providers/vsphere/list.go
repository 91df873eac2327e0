package vsphere

import (
	"context"
	"strings"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

var _ providersdk.VMLister = (*session)(nil)

// ListVMs returns the VMs within the Provider's scope (parameters.datacenter and
// parameters.folder, as adoption checks them) that are not templates and carry no
// machine UID in extraConfig (ExtraConfigMachineUID), for `banlieue adopt`. It reads the
// VMs of the Provider's datacenter (of the whole vCenter when its failure domains span
// several, or it has none) with their shape, power state and folders in one property
// collector call, after the inventory discovery the session makes once. It changes
// nothing.
func (s *session) ListVMs(ctx context.Context) ([]providersdk.UnmanagedVM, error) {
	container, err := s.vmContainer(ctx)
	if err != nil {
		return nil, err
	}
	vms, err := s.vc.LocatedVMs(ctx, container)
	if err != nil {
		return nil, err
	}
	out := []providersdk.UnmanagedVM{}
	for i := range vms {
		vm := &vms[i]
		id := providerID(&vm.VM)
		if vm.Template || vm.Identity != "" || id == "" || !s.params.inScope(vm.Location) {
			continue
		}
		out = append(out, providersdk.UnmanagedVM{
			ProviderID: id,
			Name:       vm.Name,
			Location:   vm.Location.ParentPath,
			PowerState: powerState(vm.Power),
			Hardware:   hardware(&vm.VM),
			Firmware:   firmware(vm),
		})
	}
	return out, nil
}

// inScope reports whether a VM at loc is within the datacenter (parameters.datacenter,
// a name or an inventory path) and folder (parameters.folder, an inventory path or one
// relative to the datacenter's VM folder) the Provider offers: what ListVMs lists, and
// what checkScope lets an adopting machine take.
func (p parameters) inScope(loc vcenter.Location) bool {
	trim := func(s string) string { return strings.Trim(s, "/") }
	if p.datacenter != "" && p.datacenter != loc.DatacenterName && trim(p.datacenter) != trim(loc.DatacenterPath) {
		return false
	}
	if p.folder == "" {
		return true
	}
	root := p.folder
	if !strings.HasPrefix(root, "/") {
		root = loc.DatacenterPath + "/vm/" + root
	}
	return loc.DatacenterPath != "" && providersdk.WithinPath(loc.ParentPath, root)
}

// firmware maps the VM's config.firmware, and its Secure Boot, to banlieue's firmware;
// "" when vCenter does not say.
func firmware(vm *vcenter.LocatedVM) banlieuev1.Firmware {
	switch vm.Firmware {
	case vcenter.FirmwareBIOS:
		return banlieuev1.FirmwareBIOS
	case vcenter.FirmwareEFI:
		if vm.SecureBoot {
			return banlieuev1.FirmwareEFISecure
		}
		return banlieuev1.FirmwareEFI
	}
	return ""
}
