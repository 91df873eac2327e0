package vspheresim

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
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

// runGuests plays the guests' VMware Tools: it watches every VM's power state, and
// reports an address for a VM that powers on (after delay) and none for one that
// powers off, through vcsim's SET.guest.ipAddress extra-config key. It ends with ctx.
func runGuests(ctx context.Context, c *govmomi.Client, delay time.Duration) {
	v, err := view.NewManager(c.Client).CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return
	}
	next := guestAddresses.Addr().Next()
	filter := new(property.WaitFilter).Add(v.Reference(), "VirtualMachine", []string{"runtime.powerState", "guest.ipAddress", "config.template"}, v.TraversalSpec())
	// Short server-side waits, so that stopping the simulator never waits on a long poll.
	filter.Options = &types.WaitOptions{MaxWaitSeconds: ptr.To[int32](1)}
	_ = property.WaitForUpdatesEx(ctx, property.DefaultCollector(c.Client), filter, func(updates []types.ObjectUpdate) bool {
		for _, u := range updates {
			var vm mo.VirtualMachine
			vm.Self = u.Obj
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
			if template || u.Kind == types.ObjectUpdateKindLeave {
				continue
			}
			// An update carries only what changed; read the rest when it is not there.
			if len(u.ChangeSet) < 3 {
				var cur mo.VirtualMachine
				if err := property.DefaultCollector(c.Client).RetrieveOne(ctx, u.Obj, []string{"runtime.powerState", "guest.ipAddress", "config.template"}, &cur); err != nil {
					continue
				}
				on = cur.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn
				ip = ""
				if cur.Guest != nil {
					ip = cur.Guest.IpAddress
				}
				if cur.Config != nil && cur.Config.Template {
					continue
				}
			}
			switch {
			case on && ip == "":
				addr := next
				next = next.Next()
				go setGuestAddress(ctx, c, u.Obj, addr.String(), delay)
			case !on && ip != "":
				go setGuestAddress(ctx, c, u.Obj, "", 0)
			}
		}
		return ctx.Err() != nil
	})
}

func setGuestAddress(ctx context.Context, c *govmomi.Client, ref types.ManagedObjectReference, ip string, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	_ = SetGuestAddress(ctx, object.NewVirtualMachine(c.Client, ref), ip)
}

// SetGuestAddress makes vm's simulated guest report ip ("" for none), as VMware Tools
// would.
func SetGuestAddress(ctx context.Context, vm *object.VirtualMachine, ip string) error {
	t, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: []types.BaseOptionValue{
		&types.OptionValue{Key: "SET.guest.ipAddress", Value: ip},
	}})
	if err == nil {
		err = t.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("failed to set the guest address of %s: %w", vm.Reference().Value, err)
	}
	return nil
}

// certPool returns a pool holding the PEM certificates in pemData.
func certPool(pemData []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, errNoCertificate
	}
	return pool, nil
}
