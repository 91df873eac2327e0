package proxmox

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Update brings the VM in line with the spec, one step a call: the config (one
// synchronous update; changes to CPUs, memory or firmware only while the VM is
// stopped), then each disk to grow (a resize task), then power (a task). The reconciler
// observes after each step and calls again until the VM is up to date. The VM is read
// where obs, Observe's report of this reconcile, found it (its Details), without
// listing the cluster again unless it has moved since.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
	vm, err := s.findVM(ctx, m, &obs)
	if err != nil || vm == nil {
		return providersdk.UpdateResult{}, err
	}
	if vm.Lock != "" {
		return providersdk.UpdateResult{}, providersdk.InFlight("update", "")
	}
	ch, err := s.changes(ctx, m, vm)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	have, err := s.powerState(ctx, vm)
	if err != nil {
		return providersdk.UpdateResult{}, err
	}
	want := desiredPower(m)
	if len(ch.set) > 0 || len(ch.del) > 0 {
		if len(ch.offline) > 0 && have != banlieuev1.PowerStatePoweredOff {
			if want != banlieuev1.PowerStatePoweredOff {
				return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineResizeRequiresPowerOffReason,
					"changing %s needs VM %d stopped; set the VM's desiredPowerState to PoweredOff, then back", joinChanges(ch.offline), vm.VMID)
			}
			return s.setPower(ctx, vm, have, want)
		}
		params := map[string]any{}
		maps.Copy(params, ch.set)
		if len(ch.del) > 0 {
			params["delete"] = strings.Join(ch.del, ",")
		}
		params["digest"] = vm.conf["digest"]
		if err := s.put(ctx, vmPath(vm.Node, vm.VMID, "config"), params, nil); err != nil {
			return providersdk.UpdateResult{}, s.refused("update the config of VM "+strconv.Itoa(vm.VMID), err)
		}
		return providersdk.UpdateResult{}, nil
	}
	// One resize task a call: the first disk to grow, in key order; the next call
	// grows the next one.
	if disks := slices.Sorted(maps.Keys(ch.grow)); len(disks) > 0 {
		disk := disks[0]
		var upid string
		err := s.put(ctx, vmPath(vm.Node, vm.VMID, "resize"), map[string]any{"disk": disk, "size": strconv.FormatInt(ch.grow[disk], 10) + "G"}, &upid)
		if err != nil {
			return providersdk.UpdateResult{}, s.refused("grow disk "+disk+" of VM "+strconv.Itoa(vm.VMID), err)
		}
		return providersdk.UpdateResult{Task: task(upid, providersdk.OperationUpdate)}, nil
	}
	return s.setPower(ctx, vm, have, want)
}

// setPower starts the power transition from have to want. Powering off asks the guest
// to shut down and has PVE stop the VM when it has not within the shutdown timeout
// (shutdown with forceStop), in one task; suspending pauses the VM in memory.
func (s *session) setPower(ctx context.Context, vm *vmState, have, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	var action string
	params := map[string]any{}
	switch {
	case have == want:
		return providersdk.UpdateResult{}, nil
	case want == banlieuev1.PowerStatePoweredOff:
		action = "shutdown"
		params["timeout"] = int(s.driver.shutdownTimeout.Seconds())
		params["forceStop"] = 1
	case have == banlieuev1.PowerStateSuspended:
		action = "resume"
	case have == banlieuev1.PowerStatePoweredOff:
		action = "start" // and, for Suspended, suspend on the next call
	default:
		action = "suspend"
	}
	var upid string
	if err := s.post(ctx, vmPath(vm.Node, vm.VMID, "status", action), params, &upid); err != nil {
		return providersdk.UpdateResult{}, s.refused(action+" VM "+strconv.Itoa(vm.VMID), err)
	}
	return providersdk.UpdateResult{Task: task(upid, providersdk.OperationUpdate)}, nil
}

// joinChanges joins change descriptions for a message.
func joinChanges(changes []string) string {
	if len(changes) < 2 {
		return strings.Join(changes, "")
	}
	return strings.Join(changes[:len(changes)-1], ", ") + " and " + changes[len(changes)-1]
}
