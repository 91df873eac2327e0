package libvirt

import (
	"context"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// hwChange is one difference between a domain and its machine's spec.
type hwChange struct {
	what string
	// disk is the index of a disk to grow or add; -1 for CPUs and memory.
	disk   int
	shrink bool
}

// hardwareChanges lists how the domain's CPUs, memory and disks differ from the spec.
// Disks are matched by position; disks beyond the spec's are left alone, and a disk
// whose size is unknown or unset is not compared.
func hardwareChanges(m *providersdk.Machine, ds *domainState) []hwChange {
	var out []hwChange
	hw := m.Spec.Hardware
	if hw.CPUs > 0 && uint(hw.CPUs) != ds.obs.cpus {
		out = append(out, hwChange{what: fmt.Sprintf("CPUs from %d to %d", ds.obs.cpus, hw.CPUs), disk: -1})
	}
	if hw.MemoryMiB > 0 && uint(hw.MemoryMiB) != ds.obs.memoryMiB {
		out = append(out, hwChange{what: fmt.Sprintf("memory from %d MiB to %d MiB", ds.obs.memoryMiB, hw.MemoryMiB), disk: -1})
	}
	for i, d := range m.Spec.Disks {
		want := uint64(max(d.SizeGiB, 0)) * gib
		switch {
		case i >= len(ds.obs.disks):
			out = append(out, hwChange{what: fmt.Sprintf("adding disk %q", d.Name), disk: i})
		case want == 0 || ds.capacities[i] == 0:
		case want > ds.capacities[i]:
			out = append(out, hwChange{what: fmt.Sprintf("growing disk %q to %d GiB", d.Name, d.SizeGiB), disk: i})
		case want < ds.capacities[i]:
			out = append(out, hwChange{disk: i, shrink: true,
				what: fmt.Sprintf("disk %q is %d GiB on the host and cannot shrink to %d GiB", d.Name, ds.capacities[i]/gib, d.SizeGiB)})
		}
	}
	return out
}

// Update brings the domain in line with the spec: hardware while it is shut off (a
// running domain is powered off first when the machine asks for that, and refused
// otherwise), then power.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.UpdateResult, error) {
	ds, err := s.findDomain(ctx, m)
	if err != nil || ds == nil {
		return providersdk.UpdateResult{}, err
	}
	want := desiredPower(m)
	changes := hardwareChanges(m, ds)
	var what []string
	for _, c := range changes {
		if c.shrink {
			return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
				"%s: libvirt volumes only grow here; give the VM class a disk at least that large", c.what)
		}
		what = append(what, c.what)
	}
	if len(changes) > 0 {
		switch {
		case powerState(ds) == banlieuev1.PowerStatePoweredOff:
			if err := s.reshape(ctx, m, ds, changes); err != nil {
				return providersdk.UpdateResult{}, err
			}
		case want != banlieuev1.PowerStatePoweredOff:
			return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineResizeRequiresPowerOffReason,
				"changing %s needs domain %q shut off; set the VM's desiredPowerState to PoweredOff, then back to %s",
				strings.Join(what, ", "), ds.obs.name, want)
		}
	}
	return s.setPower(ctx, m, ds, want)
}

// reshape applies hardware changes to a shut-off domain: grows and adds volumes, then
// redefines the domain with the new CPUs, memory and disks and records the new volumes
// in its metadata.
func (s *session) reshape(ctx context.Context, m *providersdk.Machine, ds *domainState, changes []hwChange) error {
	opts := &infrav1.LibvirtOptions{}
	if m.Object != nil {
		_ = m.SpecField("libvirt", opts)
	}
	h, err := s.hostInfo(ctx)
	if err != nil {
		return err
	}
	spec := s.domainSpec(m, opts, h)
	return s.do(ctx, "ReconfigureDomain", "reconfigure domain "+ds.obs.name, func(l *libvirt.Libvirt) error {
		x, err := l.DomainGetXMLDesc(ds.dom, libvirt.DomainXMLInactive)
		if err != nil {
			return err
		}
		d := &libvirtxml.Domain{}
		if err := d.Unmarshal(x); err != nil {
			return err
		}
		meta := *ds.obs.meta
		for _, c := range changes {
			if c.disk < 0 {
				continue
			}
			dev := spec.disks[c.disk]
			if c.disk < len(ds.obs.disks) {
				v := ds.obs.disks[c.disk]
				vol, err := findVolume(l, v)
				if err != nil {
					return err
				}
				if err := l.StorageVolResize(vol, uint64(m.Spec.Disks[c.disk].SizeGiB)*gib, 0); err != nil {
					return fmt.Errorf("failed to grow volume %s: %w", v, err)
				}
				continue
			}
			if err := s.ensureDisk(l, m, c.disk, m.Spec.Disks[c.disk], dev); err != nil {
				return err
			}
			d.Devices.Disks = append(d.Devices.Disks, dev.device(c.disk))
			meta.Volumes = append(meta.Volumes, dev.vol.String())
		}
		d.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: spec.cpus}
		d.Memory = &libvirtxml.DomainMemory{Value: spec.memoryMiB, Unit: "MiB"}
		d.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: spec.memoryMiB, Unit: "MiB"}
		d.Metadata = &libvirtxml.DomainMetadata{XML: replaceMetadata(d.Metadata, meta)}
		nx, err := d.Marshal()
		if err != nil {
			return err
		}
		_, err = l.DomainDefineXMLFlags(nx, 0)
		return err
	})
}

// replaceMetadata returns a domain's metadata elements with banlieue's replaced by m,
// keeping other tools' elements.
func replaceMetadata(old *libvirtxml.DomainMetadata, m machineMetadata) string {
	if old == nil {
		return m.marshal()
	}
	return stripMetadata(old.XML) + m.marshal()
}

// setPower starts the power transition to want. PoweredOff first presses the ACPI power
// button and waits (as a recorded task) for the guest to stop; when it has not within
// the shutdown timeout, or the domain is paused, it is destroyed. Suspended is a
// managed save: the domain's memory goes to disk and the domain stops, which frees the
// host's memory and survives host reboots; the next start resumes it.
func (s *session) setPower(ctx context.Context, m *providersdk.Machine, ds *domainState, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	have := powerState(ds)
	if have == want && (want != banlieuev1.PowerStateSuspended || ds.state != libvirt.DomainPaused) {
		return providersdk.UpdateResult{}, nil
	}
	var task providersdk.Task
	err := s.do(ctx, "SetPower", fmt.Sprintf("change the power of domain %s to %s", ds.obs.name, want), func(l *libvirt.Libvirt) error {
		switch want {
		case banlieuev1.PowerStatePoweredOn:
			switch ds.state {
			case libvirt.DomainPaused:
				if ds.reason != int32(libvirt.DomainPausedUser) {
					// QEMU stopped the guest itself (a crash, an I/O error, a hypervisor
					// failure): resuming it cannot work, and resetting it is the user's call.
					return providersdk.Permanent(infrav1.MachineGuestStoppedReason,
						"the hypervisor stopped domain %s (paused, reason %d: a guest crash, an I/O error or a KVM failure; "+
							"see its QEMU log on the host); set desiredPowerState to PoweredOff, then PoweredOn, to restart it, "+
							"or set the Provider's parameter domainType to qemu if KVM cannot run this guest", ds.obs.name, ds.reason)
				}
				return l.DomainResume(ds.dom)
			case libvirt.DomainPmsuspended:
				return l.DomainPmWakeup(ds.dom, 0)
			}
			return l.DomainCreate(ds.dom) // restores a managed save
		case banlieuev1.PowerStateSuspended:
			if have == banlieuev1.PowerStatePoweredOff {
				return l.DomainCreate(ds.dom) // saved on the next reconcile
			}
			return l.DomainManagedSave(ds.dom, 0)
		}
		if ds.managedSave && (ds.state == libvirt.DomainShutoff || ds.state == libvirt.DomainCrashed) {
			return l.DomainManagedSaveRemove(ds.dom, 0)
		}
		shutdown := shutdownTaskPrefix + ds.obs.uuid
		timedOut := m.Task.Ref == shutdown && s.shutdownTimedOut(m.Task)
		if ds.state == libvirt.DomainRunning && !timedOut {
			if err := l.DomainShutdownFlags(ds.dom, 0); err == nil {
				task = providersdk.Task{Ref: shutdown, Operation: providersdk.OperationUpdate}
				return nil
			}
		}
		err := l.DomainDestroyFlags(ds.dom, 0)
		if isCode(err, libvirt.ErrOperationInvalid) {
			return nil // it stopped meanwhile
		}
		return err
	})
	return providersdk.UpdateResult{Task: task}, err
}
