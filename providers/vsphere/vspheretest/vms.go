package vspheretest

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// SetGuestIP makes the VM's guest report ip, as VMware Tools would.
func (s *Simulator) SetGuestIP(ctx context.Context, moRef, ip string) error {
	return vspheresim.SetGuestAddress(ctx, s.vm(moRef), ip)
}

// SetToolsRunning makes the VM's guest report VMware Tools running, or not.
func (s *Simulator) SetToolsRunning(ctx context.Context, moRef string, running bool) error {
	return vspheresim.SetToolsRunning(ctx, s.vm(moRef), running)
}

// vm is the VM with the managed object ID moRef, on the test's session.
func (s *Simulator) vm(moRef string) *object.VirtualMachine {
	return object.NewVirtualMachine(s.Client.Client, types.ManagedObjectReference{Type: "VirtualMachine", Value: moRef})
}

// VMs returns every VM and template with its name, config, runtime, guest and network.
func (s *Simulator) VMs(ctx context.Context) ([]mo.VirtualMachine, error) {
	v, err := view.NewManager(s.Client.Client).CreateContainerView(ctx, s.Client.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, fmt.Errorf("failed to list VMs: %w", err)
	}
	defer func() { _ = v.Destroy(ctx) }()
	var vms []mo.VirtualMachine
	if err := v.Retrieve(ctx, []string{"VirtualMachine"}, []string{"name", "config", "runtime", "guest", "network", "resourcePool", "parent"}, &vms); err != nil {
		return nil, fmt.Errorf("failed to list VMs: %w", err)
	}
	return vms, nil
}

// VMsWithUID returns the VMs whose instance UUID or extraConfig banlieue.machine.uid is uid.
func (s *Simulator) VMsWithUID(ctx context.Context, uid string) ([]mo.VirtualMachine, error) {
	vms, err := s.VMs(ctx)
	if err != nil {
		return nil, err
	}
	var out []mo.VirtualMachine
	for _, vm := range vms {
		if vm.Config == nil {
			continue
		}
		if vm.Config.InstanceUuid == uid || ExtraConfig(vm, "banlieue.machine.uid") == uid {
			out = append(out, vm)
		}
	}
	return out, nil
}

// ExtraConfig returns the value of a VM's extraConfig key, or "".
func ExtraConfig(vm mo.VirtualMachine, key string) string {
	if vm.Config == nil {
		return ""
	}
	for _, o := range vm.Config.ExtraConfig {
		if v := o.GetOptionValue(); v.Key == key {
			s, _ := v.Value.(string)
			return s
		}
	}
	return ""
}
