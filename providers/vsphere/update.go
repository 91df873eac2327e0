package vsphere

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// hwChange is one difference between a VM's hardware and its machine's spec.
type hwChange struct {
	kind string // "cpus", "memory" or "disk"
	// what describes the change for a message.
	what string
	// online is true when vSphere can make the change while the VM runs.
	online bool
	// shrink is true for a disk asked to shrink, which vSphere cannot do.
	shrink bool
}

// hardwareChanges lists how the VM's CPUs, memory and disks differ from the spec. Disks
// are matched by position, in bus order; disks beyond the spec's are left alone.
func hardwareChanges(m *providersdk.Machine, vm *vmState) []hwChange {
	var out []hwChange
	hw := m.Spec.Hardware
	if hw.CPUs > 0 && hw.CPUs != vm.cpus {
		out = append(out, hwChange{kind: "cpus", what: fmt.Sprintf("CPUs from %d to %d", vm.cpus, hw.CPUs),
			online: hw.CPUs > vm.cpus && vm.cpuHotAdd})
	}
	if hw.MemoryMiB > 0 && hw.MemoryMiB != int64(vm.memoryMiB) {
		out = append(out, hwChange{kind: "memory", what: fmt.Sprintf("memory from %d MiB to %d MiB", vm.memoryMiB, hw.MemoryMiB),
			online: hw.MemoryMiB > int64(vm.memoryMiB) && vm.memoryHotAdd})
	}
	existing := disks(vm.devices)
	for i, d := range m.Spec.Disks {
		want := int64(d.SizeGiB) * gib
		switch {
		case i >= len(existing):
			out = append(out, hwChange{kind: "disk", what: fmt.Sprintf("adding disk %q", d.Name), online: true})
		case want > diskBytes(existing[i]):
			out = append(out, hwChange{kind: "disk", what: fmt.Sprintf("growing disk %q from %s to %s", d.Name, gibString(diskBytes(existing[i])), gibString(want)), online: true})
		case want < diskBytes(existing[i]):
			out = append(out, hwChange{kind: "disk", shrink: true,
				what: fmt.Sprintf("disk %q is %s on vCenter and cannot shrink to %s", d.Name, gibString(diskBytes(existing[i])), gibString(want))})
		}
	}
	return out
}

// Update brings the VM in line with the spec: hardware first (while the VM is off, or
// what vSphere can change while it runs), then power. It returns the task it started.
func (s *session) Update(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.UpdateResult, error) {
	vm, err := s.findVM(ctx, string(m.UID))
	if err != nil || vm == nil {
		return providersdk.UpdateResult{}, err
	}
	if err := s.checkIdentity(vm, m); err != nil {
		return providersdk.UpdateResult{}, err
	}
	want := desiredPower(m)
	changes := hardwareChanges(m, vm)
	var offline []string
	for _, c := range changes {
		if c.shrink {
			return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
				"%s: vSphere disks can only grow; give the VM class a disk at least that large", c.what)
		}
		if !c.online {
			offline = append(offline, c.what)
		}
	}
	if len(changes) > 0 {
		switch vm.power {
		case types.VirtualMachinePowerStatePoweredOff:
			return s.reconfigure(ctx, m, vm, changes)
		case types.VirtualMachinePowerStatePoweredOn:
			var online []hwChange
			for _, c := range changes {
				if c.online {
					online = append(online, c)
				}
			}
			if len(online) > 0 {
				return s.reconfigure(ctx, m, vm, online)
			}
			if want == banlieuev1.PowerStatePoweredOn {
				return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineResizeRequiresPowerOffReason,
					"changing %s needs VM %q powered off (CPU or memory hot-add is off, or the change is a decrease); "+
						"set the VM's desiredPowerState to PoweredOff, then back to PoweredOn", describeChanges(offline), vm.name)
			}
		case types.VirtualMachinePowerStateSuspended:
			if want == banlieuev1.PowerStateSuspended {
				return providersdk.UpdateResult{}, providersdk.Permanent(infrav1.MachineResizeRequiresPowerOffReason,
					"changing %s needs VM %q powered off, and it is suspended; "+
						"set the VM's desiredPowerState to PoweredOff, then back to Suspended", describeChanges(offline), vm.name)
			}
		}
	}
	return s.setPower(ctx, m, vm, want)
}

// reconfigure applies hardware changes in one ReconfigVM task.
func (s *session) reconfigure(ctx context.Context, m *providersdk.Machine, vm *vmState, changes []hwChange) (providersdk.UpdateResult, error) {
	spec := types.VirtualMachineConfigSpec{}
	withDisks := false
	for _, c := range changes {
		switch c.kind {
		case "cpus":
			spec.NumCPUs = m.Spec.Hardware.CPUs
		case "memory":
			spec.MemoryMB = m.Spec.Hardware.MemoryMiB
		case "disk":
			withDisks = true
		}
	}
	if withDisks {
		pl := &placement{}
		if fd := s.domainOfHost(ctx, vm.host); fd != "" {
			inv, err := s.domains(ctx, false)
			if err != nil {
				return providersdk.UpdateResult{}, err
			}
			pl.fd = inv.byName[fd]
		}
		devs, _, err := s.diskChanges(m, vm.devices, pl, &keySource{next: -200}, false)
		if err != nil {
			return providersdk.UpdateResult{}, err
		}
		spec.DeviceChange = devs
	}
	res, err := methods.ReconfigVM_Task(ctx, s.vim, &types.ReconfigVM_Task{This: vm.ref, Spec: spec})
	if err != nil {
		return providersdk.UpdateResult{}, s.fail("reconfigure VM "+vm.name, err)
	}
	return providersdk.UpdateResult{Task: task(res.Returnval, providersdk.OperationUpdate)}, nil
}

// setPower starts the power transition to want. Powering off shuts the guest down when
// VMware Tools run, and powers the VM off when they do not, when the guest refuses, or
// when it has not stopped within the shutdown timeout.
func (s *session) setPower(ctx context.Context, m *providersdk.Machine, vm *vmState, want banlieuev1.PowerState) (providersdk.UpdateResult, error) {
	have := powerState(vm.power)
	switch {
	case have == want:
		return providersdk.UpdateResult{}, nil
	case want == banlieuev1.PowerStatePoweredOn,
		want == banlieuev1.PowerStateSuspended && have == banlieuev1.PowerStatePoweredOff:
		res, err := methods.PowerOnVM_Task(ctx, s.vim, &types.PowerOnVM_Task{This: vm.ref})
		if err != nil {
			return providersdk.UpdateResult{}, s.fail("power on VM "+vm.name, err)
		}
		return providersdk.UpdateResult{Task: task(res.Returnval, providersdk.OperationUpdate)}, nil
	case want == banlieuev1.PowerStateSuspended:
		res, err := methods.SuspendVM_Task(ctx, s.vim, &types.SuspendVM_Task{This: vm.ref})
		if err != nil {
			return providersdk.UpdateResult{}, s.fail("suspend VM "+vm.name, err)
		}
		return providersdk.UpdateResult{Task: task(res.Returnval, providersdk.OperationUpdate)}, nil
	}
	// want == PoweredOff.
	shutdown := shutdownTaskPrefix + vm.ref.Value
	timedOut := m.Task.Ref == shutdown && s.shutdownTimedOut(m.Task)
	if have == banlieuev1.PowerStatePoweredOn && vm.toolsRunning && !timedOut {
		_, err := methods.ShutdownGuest(ctx, s.vim, &types.ShutdownGuest{This: vm.ref})
		switch {
		case err == nil:
			return providersdk.UpdateResult{Task: providersdk.Task{Ref: shutdown, Operation: providersdk.OperationUpdate}}, nil
		case !fault.Is(err, &types.ToolsUnavailable{}) && !fault.Is(err, &types.InvalidState{}):
			return providersdk.UpdateResult{}, s.fail("shut down the guest of VM "+vm.name, err)
		}
	}
	res, err := methods.PowerOffVM_Task(ctx, s.vim, &types.PowerOffVM_Task{This: vm.ref})
	if err != nil {
		return providersdk.UpdateResult{}, s.fail("power off VM "+vm.name, err)
	}
	return providersdk.UpdateResult{Task: task(res.Returnval, providersdk.OperationUpdate)}, nil
}

// diskChanges grows the existing disks the spec makes larger and adds the disks it has
// beyond them, with their provisioning, on their storage class's datastore. For a clone
// it also returns disk locators that place the template's disks and set their format.
func (s *session) diskChanges(m *providersdk.Machine, devices object.VirtualDeviceList, pl *placement, keys *keySource, clone bool) ([]types.BaseVirtualDeviceConfigSpec, []types.VirtualMachineRelocateSpecDiskLocator, error) {
	existing := disks(devices)
	var (
		changes  []types.BaseVirtualDeviceConfigSpec
		locators []types.VirtualMachineRelocateSpecDiskLocator
		ctl      *controller
	)
	for i, d := range m.Spec.Disks {
		want := int64(d.SizeGiB) * gib
		ds, err := s.diskTarget(d, pl)
		if err != nil {
			return nil, nil, err
		}
		if i < len(existing) {
			disk := existing[i]
			have := diskBytes(disk)
			if want < have {
				return nil, nil, providersdk.Permanent(infrav1.MachineDiskShrinkNotSupportedReason,
					"the template's disk %d is %s, larger than the %s disk %q asks for; vSphere disks cannot shrink",
					i, gibString(have), gibString(want), d.Name)
			}
			if want > have {
				if clone && pl.linked {
					return nil, nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
						"a linked clone cannot grow disk %q from %s to %s; use cloneMode full", d.Name, gibString(have), gibString(want))
				}
				disk.CapacityInBytes, disk.CapacityInKB = want, want/1024
				changes = append(changes, &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: disk})
			}
			if clone && (ds != nil || d.Provisioning != "") {
				loc := types.VirtualMachineRelocateSpecDiskLocator{DiskId: disk.Key, DiskBackingInfo: flatBacking("", nil, d.Provisioning)}
				switch b, ok := disk.Backing.(*types.VirtualDiskFlatVer2BackingInfo); {
				case ds != nil:
					loc.Datastore = ds.ref
				case ok && b.Datastore != nil:
					loc.Datastore = *b.Datastore
				default:
					continue
				}
				locators = append(locators, loc)
			}
			continue
		}
		if ctl == nil {
			var add types.BaseVirtualDeviceConfigSpec
			ctl, add = scsiController(devices, keys)
			if add != nil {
				changes = append(changes, add)
			}
		}
		u, err := ctl.freeUnit()
		if err != nil {
			return nil, nil, err
		}
		fileName := ""
		var dsRef *types.ManagedObjectReference
		if ds != nil {
			fileName, dsRef = "["+ds.name+"]", &ds.ref
		}
		disk := &types.VirtualDisk{
			VirtualDevice: types.VirtualDevice{
				Key: keys.take(), ControllerKey: ctl.key, UnitNumber: &u,
				Backing: flatBacking(fileName, dsRef, d.Provisioning),
			},
			CapacityInKB: want / 1024, CapacityInBytes: want,
		}
		changes = append(changes, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate, Device: disk,
		})
	}
	return changes, locators, nil
}

// diskTarget is the datastore of a disk: its storage class target, else the placement's.
func (s *session) diskTarget(d infrav1.MachineDisk, pl *placement) (*datastoreInfo, error) {
	if pl.fd != nil && hasStorageKey(d.Target) {
		return pl.fd.diskDatastore(d)
	}
	return pl.datastore, nil
}

// flatBacking is a VMDK backing with the asked-for provisioning; thin by default.
func flatBacking(fileName string, ds *types.ManagedObjectReference, p banlieuev1.DiskProvisioning) *types.VirtualDiskFlatVer2BackingInfo {
	thin, eager := true, false
	switch p {
	case banlieuev1.DiskProvisioningThick:
		thin = false
	case banlieuev1.DiskProvisioningEagerZeroed:
		thin, eager = false, true
	}
	return &types.VirtualDiskFlatVer2BackingInfo{
		VirtualDeviceFileBackingInfo: types.VirtualDeviceFileBackingInfo{FileName: fileName, Datastore: ds},
		DiskMode:                     string(types.VirtualDiskModePersistent),
		ThinProvisioned:              types.NewBool(thin),
		EagerlyScrub:                 types.NewBool(eager),
	}
}

// controller is a SCSI controller new disks go on, and its units in use.
type controller struct {
	key  int32
	used map[int32]bool
}

// scsiController returns the first SCSI controller, or a new paravirtual one with the
// spec that adds it.
func scsiController(devices object.VirtualDeviceList, keys *keySource) (*controller, types.BaseVirtualDeviceConfigSpec) {
	var found types.BaseVirtualSCSIController
	for _, d := range devices {
		if c, ok := d.(types.BaseVirtualSCSIController); ok {
			if found == nil || c.GetVirtualSCSIController().Key < found.GetVirtualSCSIController().Key {
				found = c
			}
		}
	}
	if found == nil {
		pv := &types.ParaVirtualSCSIController{VirtualSCSIController: types.VirtualSCSIController{
			SharedBus:         types.VirtualSCSISharingNoSharing,
			VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: keys.take()}},
		}}
		return &controller{key: pv.Key, used: map[int32]bool{}},
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: pv}
	}
	c := &controller{key: found.GetVirtualSCSIController().Key, used: map[int32]bool{}}
	for _, d := range devices {
		if v := d.GetVirtualDevice(); v.ControllerKey == c.key && v.UnitNumber != nil {
			c.used[*v.UnitNumber] = true
		}
	}
	return c, nil
}

// freeUnit takes the controller's lowest free unit; unit 7 is the controller's own.
func (c *controller) freeUnit() (int32, error) {
	for u := int32(0); u < 16; u++ {
		if u != 7 && !c.used[u] {
			c.used[u] = true
			return u, nil
		}
	}
	return 0, providersdk.Permanent(infrav1.MachineFailedReason, "the VM's SCSI controller has no free unit for another disk")
}
