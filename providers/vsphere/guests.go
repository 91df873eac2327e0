package vsphere

import (
	"context"

	"github.com/vmware/govmomi/vim25/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

var _ providersdk.GuestAddressReporter = (*session)(nil)

// guestAddressProperties are the VM properties GuestsWithAddresses reads: the ones
// providerID and addresses are made of, as Observe reads them.
var guestAddressProperties = []string{"config.uuid", "guest.ipAddress", "guest.net"}

// GuestsWithAddresses returns the providerIDs of the VMs whose guests report an address
// that Observe would report. It reads every VM of the Provider's datacenter (of the whole
// vCenter when the Provider's failure domains span several datacenters) through one
// container view, in one property collector call, whatever the number of VMs: the
// Provider controller calls it on its inventory refresh instead of each machine that
// waits for its guest's address looking at its VM.
func (s *session) GuestsWithAddresses(ctx context.Context) (map[string]bool, error) {
	container, err := s.vmContainer(ctx)
	if err != nil {
		return nil, err
	}
	objs, err := s.retrieveIn(ctx, container, map[string][]string{"VirtualMachine": guestAddressProperties})
	if err != nil {
		return nil, s.fail("read the addresses of the VMs' guests", err)
	}
	out := map[string]bool{}
	for _, oc := range objs {
		vm := vmStateOf(oc.Obj, oc.PropSet)
		if id := providerID(vm); id != "" && len(addresses(vm)) > 0 {
			out[id] = true
		}
	}
	return out, nil
}

// vmContainer is where the Provider's VMs are: the one datacenter of its failure
// domains, or the root folder when they span several (or there are none).
func (s *session) vmContainer(ctx context.Context) (types.ManagedObjectReference, error) {
	inv, err := s.domains(ctx, false)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	var dc types.ManagedObjectReference
	for _, fd := range inv.domains {
		if dc.Value != "" && fd.datacenter != dc {
			return s.vim.ServiceContent.RootFolder, nil
		}
		dc = fd.datacenter
	}
	if dc.Value == "" {
		return s.vim.ServiceContent.RootFolder, nil
	}
	return dc, nil
}
