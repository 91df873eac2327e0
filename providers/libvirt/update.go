package libvirt

import (
	"context"
	"fmt"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// backendName names libvirt in the SDK's messages.
const backendName = "libvirt"

// hardware is a domain's shape, for providersdk.HardwareDiff.
func hardware(dom *host.Domain) providersdk.Hardware {
	return providersdk.Hardware{CPUs: int32(dom.CPUs), MemoryMiB: int64(dom.MemoryMiB), DiskBytes: dom.DiskBytes}
}

// Update brings the domain Observe found in line with the spec: hardware while it is
// shut off (a running domain is powered off first when the machine asks for that;
// otherwise what onlineChange allows is made while it runs, and the rest waits for its
// next power cycle), then power. Without a domain there is nothing to update.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.UpdateResult, error) {
	dom := domainOf(obs)
	if dom == nil {
		return providersdk.UpdateResult{}, nil
	}
	var err error
	want := m.DesiredPower()
	if dom.BootID == "" && powerState(dom) == banlieuev1.PowerStatePoweredOn {
		// The boot ID Observe reports, in the live definition only: a restart
		// (spec.restartRequestedAt) tells this boot from the next by it.
		if dom.BootID, err = s.host.MarkBoot(ctx, dom); err != nil {
			return providersdk.UpdateResult{}, err
		}
	}
	changes := providersdk.HardwareDiff(m.Spec, hardwareOf(m, dom))
	if err := providersdk.RefuseShrink(backendName, changes); err != nil {
		return providersdk.UpdateResult{}, err
	}
	switch {
	case len(changes) == 0:
	case powerState(dom) == banlieuev1.PowerStatePoweredOff:
		if err := s.reshape(ctx, m, dom, changes); err != nil {
			return providersdk.UpdateResult{}, err
		}
	case want != banlieuev1.PowerStatePoweredOff:
		// The rest waits for the domain's next power cycle (Observe reports it pending);
		// it is made above once the domain is shut off, before it starts again.
		for _, c := range changes {
			if onlineChange(dom, c) {
				if err := s.changeOnline(ctx, dom, c); err != nil {
					return providersdk.UpdateResult{}, err
				}
			}
		}
	}
	return s.setPower(ctx, m, dom, want)
}

// changeOnline makes c, which onlineChange allows, in the running domain dom, live and
// in its definition. Each step aims at the spec's value from what the live domain has
// (c.From, as Observe read it): a step repeated after a crash finds it made and is not
// taken again, so no second DIMM is plugged.
func (s *session) changeOnline(ctx context.Context, dom *host.Domain, c providersdk.HardwareChange) error {
	switch c.Kind {
	case providersdk.ChangeDiskGrow:
		return s.host.GrowDiskOnline(ctx, dom, dom.Disks[c.Disk], c.To)
	case providersdk.ChangeCPUs:
		return s.host.SetCPUs(ctx, dom, uint(c.To))
	case providersdk.ChangeMemory:
		return s.host.AddMemory(ctx, dom, uint(c.To-c.From))
	}
	return nil
}

// reshape applies hardware changes to a shut-off domain: grows and adds volumes, then
// redefines the domain with the new CPUs, memory and disks, and the maxima a domain
// made with hotplug gets for its new size (those of the Provider's parameters now), and
// records the new volumes in its metadata. A volume grown or made before a crash is
// found again by name.
func (s *session) reshape(ctx context.Context, m *providersdk.Machine, dom *host.Domain, changes []providersdk.HardwareChange) error {
	opts := &infrav1.LibvirtOptions{}
	if err := m.Options("libvirt", opts); err != nil {
		return err
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return err
	}
	hot := s.domainHotplug(dom)
	if s.hotplugErr != nil && (hot.CPU || hot.Memory) {
		return fmt.Errorf("failed to resize domain %s: %w", dom.Name, s.hotplugErr)
	}
	spec := s.domainSpec(m, dom.UUID, opts, h, hot)
	r := host.Reshape{
		CPUs: spec.CPUs, MaxCPUs: spec.MaxCPUs,
		MemoryMiB: spec.MemoryMiB, MaxMemoryMiB: spec.MaxMemoryMiB, MemorySlots: spec.MemorySlots,
		Metadata: *dom.Metadata,
	}
	r.Metadata.Volumes = append([]string(nil), dom.Metadata.Volumes...)
	for _, c := range changes {
		switch c.Kind {
		case providersdk.ChangeDiskGrow:
			if err := s.host.ResizeVolume(ctx, dom.Disks[c.Disk], c.To); err != nil {
				return err
			}
		case providersdk.ChangeDiskAdd:
			disk := spec.Disks[c.Disk]
			if err := s.ensureDisk(ctx, m, c.Disk, m.Spec.Disks[c.Disk], disk); err != nil {
				return err
			}
			r.AddDisks = append(r.AddDisks, host.IndexedDisk{Index: c.Disk, Disk: disk})
			r.Metadata.Volumes = append(r.Metadata.Volumes, disk.Volume.String())
		}
	}
	return s.host.Reconfigure(ctx, dom, r)
}

// setPower starts the power transition to want. PoweredOff first presses the ACPI power
// button and waits (as a recorded task) for the guest to stop; when it has not within
// the shutdown timeout, or the domain is paused, it is destroyed. Suspended is a
// managed save: the domain's memory goes to disk and the domain stops, which frees the
// host's memory and survives host reboots; the next start resumes it.
func (s *session) setPower(ctx context.Context, m *providersdk.Machine, dom *host.Domain, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	have := powerState(dom)
	if have == want && (want != banlieuev1.PowerStateSuspended || dom.State != host.StatePaused) {
		return providersdk.UpdateResult{}, nil
	}
	if dom.PausedInTransit && want != banlieuev1.PowerStatePoweredOff {
		// libvirt is still starting (or saving, migrating) the domain, as after a provider
		// restarted mid-start: it is waited for, never failed. Powering off need not wait.
		return providersdk.UpdateResult{}, providersdk.InFlight(providersdk.OperationUpdate, "")
	}
	switch want {
	case banlieuev1.PowerStatePoweredOn:
		switch dom.State {
		case host.StatePaused:
			if !dom.PausedByUser {
				// QEMU stopped the guest itself (a crash, an I/O error, a hypervisor
				// failure): resuming it cannot work, and resetting it is the user's call.
				return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineGuestStoppedReason,
					"the hypervisor stopped domain %s (paused, reason %d: a guest crash, an I/O error or a KVM failure; "+
						"see its QEMU log on the host); set desiredPowerState to PoweredOff, then PoweredOn, to restart it, "+
						"or set the Provider's parameter domainType to qemu if KVM cannot run this guest", dom.Name, dom.Reason)
			}
			return providersdk.UpdateResult{}, s.host.Resume(ctx, dom)
		case host.StatePMSuspended:
			return providersdk.UpdateResult{}, s.host.Wakeup(ctx, dom)
		}
		return providersdk.UpdateResult{}, s.start(ctx, dom) // restores a managed save
	case banlieuev1.PowerStateSuspended:
		if have == banlieuev1.PowerStatePoweredOff {
			return providersdk.UpdateResult{}, s.start(ctx, dom) // saved on the next reconcile
		}
		return providersdk.UpdateResult{}, s.host.ManagedSave(ctx, dom)
	}
	if dom.ManagedSave && (dom.State == host.StateShutoff || dom.State == host.StateCrashed) {
		return providersdk.UpdateResult{}, s.host.RemoveManagedSave(ctx, dom)
	}
	shutdown := shutdownTask(dom)
	timedOut := m.Task.Ref == shutdown && m.Task.TimedOut(s.driver.now(), s.driver.shutdownTimeout)
	if dom.State == host.StateRunning && !timedOut {
		err := s.host.Shutdown(ctx, dom)
		if err == nil {
			return providersdk.UpdateResult{Task: providersdk.Task{Ref: shutdown, Operation: providersdk.OperationUpdate}}, nil
		}
		if providersdk.IsUnreachable(err) {
			return providersdk.UpdateResult{}, err
		}
		// A guest that refuses the power button (no ACPI) is destroyed instead.
	}
	return providersdk.UpdateResult{}, s.host.Destroy(ctx, dom)
}
