package vspheresim

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/utils/ptr"
)

// guestAddresses is where simulated guests take their addresses from: 198.18.0.0/15 is
// reserved for benchmarking (RFC 2544), so nothing real is ever there.
var guestAddresses = netip.MustParsePrefix("198.18.0.0/15")

// guestRetry is how long the guests wait to watch again after losing the simulator, as
// they do while it is Down.
const guestRetry = 200 * time.Millisecond

// guestProps are the properties that decide whether a guest has an address.
var guestProps = []string{"runtime.powerState", "guest.ipAddress", "config.template"}

// guests plays the guests' VMware Tools: a VM that powers on reports an address after
// delay, and one that powers off reports none, through vcsim's SET.guest.ipAddress
// extra-config key.
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

// run watches the VMs until ctx ends, again after the simulator comes back Up.
func (g *guests) run(ctx context.Context) {
	for ctx.Err() == nil {
		g.watch(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(guestRetry):
		}
	}
}

// watch reports on every VM's power state until ctx ends or the connection fails.
func (g *guests) watch(ctx context.Context) {
	// A collector and a view of the watch's own: when the connection fails, the filter
	// that WaitForUpdatesEx leaves behind goes with them, rather than break the next
	// watch on the session's default collector.
	pc, err := property.DefaultCollector(g.c.Client).Create(ctx)
	if err != nil {
		return
	}
	defer func() { _ = pc.Destroy(context.WithoutCancel(ctx)) }()
	v, err := view.NewManager(g.c.Client).CreateContainerView(ctx, g.c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return
	}
	defer func() { _ = v.Destroy(context.WithoutCancel(ctx)) }()
	filter := new(property.WaitFilter).Add(v.Reference(), "VirtualMachine", guestProps, v.TraversalSpec())
	// Short server-side waits, so that stopping the simulator never waits on a long poll.
	filter.Options = &types.WaitOptions{MaxWaitSeconds: ptr.To[int32](1)}
	_ = property.WaitForUpdatesEx(ctx, pc, filter, func(updates []types.ObjectUpdate) bool {
		for _, u := range updates {
			if u.Kind != types.ObjectUpdateKindLeave {
				g.update(ctx, u)
			}
		}
		return ctx.Err() != nil
	})
}

// update starts a report for a VM whose power state and address disagree.
func (g *guests) update(ctx context.Context, u types.ObjectUpdate) {
	var on, template bool
	ip := ""
	for _, ch := range u.ChangeSet {
		switch ch.Name {
		case "runtime.powerState":
			on = ch.Val == types.VirtualMachinePowerStatePoweredOn
		case "guest.ipAddress":
			ip, _ = ch.Val.(string)
		case "config.template":
			template, _ = ch.Val.(bool)
		}
	}
	// An update carries only what changed; read the rest when it is not there.
	if len(u.ChangeSet) < len(guestProps) {
		var cur mo.VirtualMachine
		if err := property.DefaultCollector(g.c.Client).RetrieveOne(ctx, u.Obj, guestProps, &cur); err != nil {
			return
		}
		on = cur.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn
		ip = ""
		if cur.Guest != nil {
			ip = cur.Guest.IpAddress
		}
		template = cur.Config != nil && cur.Config.Template
	}
	if template {
		return
	}
	switch {
	case on && ip == "":
		g.mu.Lock()
		addr := g.next
		g.next = g.next.Next()
		g.mu.Unlock()
		g.report(ctx, u.Obj, addr.String(), g.delay)
	case !on && ip != "":
		g.report(ctx, u.Obj, "", 0)
	}
}

// report makes the VM's guest report ip after delay, unless a report is pending.
func (g *guests) report(ctx context.Context, ref types.ManagedObjectReference, ip string, delay time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[ref] {
		return
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
