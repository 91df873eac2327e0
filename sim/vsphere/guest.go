package vspheresim

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// guestAddresses is where simulated guests take their addresses from: 198.18.0.0/15 is
// reserved for benchmarking (RFC 2544), so nothing real is ever there.
var guestAddresses = netip.MustParsePrefix("198.18.0.0/15")

// guestPoll is how often the guests look at the VMs' power states.
const guestPoll = 100 * time.Millisecond

// guestProps are the properties that decide whether a guest has an address.
var guestProps = []string{"runtime.powerState", "guest.ipAddress", "config.template"}

// guests plays the guests' VMware Tools: a VM that powers on reports an address after
// delay, and one that powers off reports none, through vcsim's SET.guest.ipAddress
// extra-config key.
//
// The guests poll rather than watch. In govmomi's simulator (v0.56.0) a property filter
// that traverses a container view takes the filter's lock, then the view's, while a VM
// being created in the view takes them the other way round: a watch deadlocked the
// whole simulator when VMs were cloned while others reported addresses
// (govmomi#4109 fixes the same lock order for list views).
type guests struct {
	c     *govmomi.Client
	delay time.Duration
	// reports counts the pending reports, so that Stop waits for them.
	reports *sync.WaitGroup

	mu      sync.Mutex
	next    netip.Addr
	pending map[types.ManagedObjectReference]bool
}

// newGuests plays the guests on c, handing out addresses from the start of
// guestAddresses and counting pending reports in reports.
func newGuests(c *govmomi.Client, delay time.Duration, reports *sync.WaitGroup) *guests {
	return &guests{c: c, delay: delay, reports: reports, next: guestAddresses.Addr().Next(), pending: map[types.ManagedObjectReference]bool{}}
}

// run looks at the VMs every guestPoll until ctx ends; a look that fails (the
// simulator is Down, or restarted and ended the session's view) is made again with a
// new view.
func (g *guests) run(ctx context.Context) {
	var v *view.ContainerView
	defer func() {
		if v != nil {
			_ = v.Destroy(context.WithoutCancel(ctx))
		}
	}()
	for ctx.Err() == nil {
		if v == nil {
			v, _ = view.NewManager(g.c.Client).CreateContainerView(ctx, g.c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
		}
		if v != nil {
			var vms []mo.VirtualMachine
			if err := v.Retrieve(ctx, []string{"VirtualMachine"}, guestProps, &vms); err != nil {
				v = nil
			}
			for i := range vms {
				g.update(ctx, &vms[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(guestPoll):
		}
	}
}

// update starts a report for a VM whose power state and address disagree.
func (g *guests) update(ctx context.Context, vm *mo.VirtualMachine) {
	if vm.Config != nil && vm.Config.Template {
		return
	}
	on := vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn
	ip := ""
	if vm.Guest != nil {
		ip = vm.Guest.IpAddress
	}
	switch {
	case on && ip == "":
		g.report(ctx, vm.Self, true, g.delay)
	case !on && ip != "":
		g.report(ctx, vm.Self, false, 0)
	}
}

// report makes the VM's guest report the next address (none unless withIP) after delay,
// unless a report is pending.
func (g *guests) report(ctx context.Context, ref types.ManagedObjectReference, withIP bool, delay time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[ref] {
		return
	}
	ip := ""
	if withIP {
		ip = g.next.String()
		g.next = g.next.Next()
	}
	g.pending[ref] = true
	g.reports.Add(1)
	go func() {
		defer g.reports.Done()
		defer func() {
			g.mu.Lock()
			delete(g.pending, ref)
			g.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		// A report that fails (the VM is gone, or the simulator Down) is made again,
		// as the next look finds, when the VM still needs it.
		_ = SetGuestAddress(ctx, object.NewVirtualMachine(g.c.Client, ref), ip)
	}()
}

// SetGuestAddress makes vm's simulated guest report ip ("" for none), as VMware Tools
// would: vcsim maps the extra-config key SET.guest.ipAddress onto guest.ipAddress and
// the first NIC's address.
func SetGuestAddress(ctx context.Context, vm *object.VirtualMachine, ip string) error {
	return setExtraConfig(ctx, vm, "SET.guest.ipAddress", ip)
}

// SetToolsRunning makes vm's simulated guest report VMware Tools running, or not.
func SetToolsRunning(ctx context.Context, vm *object.VirtualMachine, running bool) error {
	status := types.VirtualMachineToolsRunningStatusGuestToolsNotRunning
	if running {
		status = types.VirtualMachineToolsRunningStatusGuestToolsRunning
	}
	return setExtraConfig(ctx, vm, "SET.guest.toolsRunningStatus", string(status))
}

// setExtraConfig sets one extra-config key of vm and waits for it: vcsim reads the
// guest's state from SET.* keys.
func setExtraConfig(ctx context.Context, vm *object.VirtualMachine, key, value string) error {
	task, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{
		ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: key, Value: value}},
	})
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("failed to set %s on %s: %w", key, vm.Reference().Value, err)
	}
	return nil
}
