package vsphere

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// GuestsWithAddresses returns the providerIDs of the VMs whose guests report an address
// that Observe would report. It reads the UUID and the guest's primary address of every
// VM of the Provider's datacenter (of the whole vCenter when the Provider's failure
// domains span several) through one container view, in one property collector call,
// whatever the number of VMs: the SDK calls it for the looks of a new VM's guest window,
// and the Provider controller on its inventory refresh, instead of each machine that
// waits for its guest's address looking at its VM.
//
// A guest whose primary address Observe would report reports an address. One with no
// primary address reports none: VMware Tools make the primary address one of the
// addresses they report. Only the VMs whose primary address Observe would drop (a
// link-local one, as many guests' first IPv6 address is) have their NICs' addresses
// read, in a second call: the NICs are most of what reading the guests costs vCenter,
// and the answer comes again every few seconds while VMs start. Should one of those VMs
// go between the two calls (vCenter then refuses the second), they are left out of
// this answer, and the next one reads them again.
func (s *session) GuestsWithAddresses(ctx context.Context) (map[string]bool, error) {
	container, err := s.vmContainer(ctx)
	if err != nil {
		return nil, err
	}
	vms, err := s.vc.GuestPrimaryAddresses(ctx, container)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	var nics []vcenter.Ref
	for i := range vms {
		switch vm := &vms[i]; {
		case vm.GuestIP == "" || providerID(vm) == "":
			// No primary address: the guest reports none.
		case len(addresses(vm)) > 0:
			out[providerID(vm)] = true
		default:
			nics = append(nics, vm.Ref)
		}
	}
	vms, err = s.vc.GuestAddresses(ctx, nics)
	if vcenter.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range vms {
		if id := providerID(&vms[i]); id != "" && len(addresses(&vms[i])) > 0 {
			out[id] = true
		}
	}
	return out, nil
}

// vmContainer is where the Provider's VMs are: the one datacenter of its failure
// domains, or the root folder when they span several (or there are none).
func (s *session) vmContainer(ctx context.Context) (vcenter.Ref, error) {
	inv, err := s.domains(ctx, false)
	if err != nil {
		return vcenter.Ref{}, err
	}
	var dc vcenter.Ref
	for _, fd := range inv.domains {
		if !dc.IsZero() && fd.datacenter != dc {
			return s.vc.RootFolder(), nil
		}
		dc = fd.datacenter
	}
	if dc.IsZero() {
		return s.vc.RootFolder(), nil
	}
	return dc, nil
}

// ListMarked returns the VMs of the Provider's datacenter (of the whole vCenter when its
// failure domains span several) whose extraConfig holds a machine UID
// (ExtraConfigMachineUID), read through one container view in one property collector
// call. Templates are left out. The mark names no namespace or name: the VM's name,
// "<namespace>.<name>", may be shortened, so it is not read back as one.
func (s *session) ListMarked(ctx context.Context) ([]providersdk.MarkedVM, error) {
	container, err := s.vmContainer(ctx)
	if err != nil {
		return nil, err
	}
	vms, err := s.vc.MarkedVMs(ctx, container)
	if err != nil {
		return nil, err
	}
	var out []providersdk.MarkedVM
	for i := range vms {
		vm := &vms[i]
		if vm.Identity == "" || vm.Template {
			continue
		}
		out = append(out, providersdk.MarkedVM{ProviderID: providerID(vm), Name: vm.Name, MachineUID: types.UID(vm.Identity),
			Machine:   types.NamespacedName{Namespace: vm.Marks[ExtraConfigMachineNamespace], Name: vm.Marks[ExtraConfigMachineName]},
			ClusterID: vm.Marks[ExtraConfigClusterUID],
			// A VM banlieue clones gets the machine's UID as its instance UUID; an
			// adopted one keeps its own.
			Adopted: vm.InstanceUUID != vm.Identity})
	}
	return out, nil
}
