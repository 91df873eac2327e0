package libvirt

import (
	"context"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// defineUEFI defines, through libvirt directly and not started, a domain that boots
// OVMF from a pflash loader, with 3 vCPUs, 160 MiB, a 1 GiB pool volume and a file
// disk; it is undefined, with its volume, when the test ends.
func defineUEFI(t *testing.T, d *libvirtd.Daemon) (name, id string) {
	t.Helper()
	suffix := uuid.NewString()[:8]
	name, id = "uefi-"+suffix, uuid.NewString()
	vol := name + "-root.qcow2"
	x, err := (&libvirtxml.Domain{
		Type: TCG, Name: name, UUID: id,
		Memory:   &libvirtxml.DomainMemory{Value: 160, Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Placement: "static", Value: 3},
		Features: &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OS: &libvirtxml.DomainOS{
			Type:   &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "q35"},
			Loader: &libvirtxml.DomainLoader{Path: "/usr/share/OVMF/OVMF_CODE.fd", Readonly: "yes", Type: "pflash"},
		},
		Devices: &libvirtxml.DomainDeviceList{Disks: []libvirtxml.DomainDisk{
			{
				Device: "disk", Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
				Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: testPool, Volume: vol}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
			},
			{
				Device: "disk", Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/var/tmp/" + name + "-data.img"}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vdb", Bus: "virtio"},
			},
		}},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		if err := libvirtd.CreateBlankImageOn(l, testPool, vol, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := l.DomainDefineXMLFlags(x, 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() {
		inspect(t, d, func(l *libvirt.Libvirt) {
			if dom, err := l.DomainLookupByName(name); err == nil {
				_ = l.DomainUndefineFlags(dom, libvirt.DomainUndefineNvram)
			}
			if pool, err := l.StoragePoolLookupByName(testPool); err == nil {
				if v, err := l.StorageVolLookupByName(pool, vol); err == nil {
					_ = l.StorageVolDelete(v, 0)
				}
			}
		})
	})
	return name, id
}

// ListVMs lists the domains defined outside banlieue once each, with their name, power,
// shape and firmware, and provider IDs that an adopting machine's Observe finds
// unclaimed; a domain a machine created and one a machine adopted are not listed.
// Domains of other tests on the shared daemon may be listed too; only these are looked
// at, and no listed domain may carry a mark.
func TestListVMsListsTheDomainsNoMachineManages(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	prefix := s.ProviderIDPrefix()

	running := defineForeign(t, d, true)
	uefiName, uefiID := defineUEFI(t, d)
	made := machine("list-made-"+uuid.NewString()[:8], func(m *providersdk.Machine) { m.Spec.PowerState = banlieuev1.PowerStatePoweredOff })
	if err := createMachine(ctx, s, made); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = deleteMachine(context.Background(), s, made) })
	madeID := mustObserve(t, s, made).ProviderID
	adopted := defineForeign(t, d, false)
	adopter := adopting("list-adopter-"+uuid.NewString()[:8], prefix+adopted.uuid)
	if _, err := s.Adopt(ctx, adopter, mustObserve(t, s, adopter)); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if o := mustObserve(t, s, adopter); !o.Exists || o.Unclaimed {
		t.Fatalf("the adopted domain is not the adopter's: %+v", o)
	}

	list, err := s.ListVMs(ctx)
	if err != nil {
		t.Fatalf("ListVMs: %v", err)
	}
	want := map[string]providersdk.UnmanagedVM{
		prefix + running.uuid: {
			ProviderID: prefix + running.uuid, Name: running.name, PowerState: banlieuev1.PowerStatePoweredOn,
			// The root volume and the shared read-only one, 1 GiB each.
			Hardware: providersdk.Hardware{CPUs: 2, MemoryMiB: 192, DiskBytes: []int64{providersdk.GiB, providersdk.GiB}},
			Firmware: banlieuev1.FirmwareBIOS,
		},
		prefix + uefiID: {
			ProviderID: prefix + uefiID, Name: uefiName, PowerState: banlieuev1.PowerStatePoweredOff,
			// A file disk beside the volume: both sizes unknown, as adoption reads them.
			Hardware: providersdk.Hardware{CPUs: 3, MemoryMiB: 160, DiskBytes: []int64{0, 0}},
			Firmware: banlieuev1.FirmwareEFI,
		},
	}
	got := map[string]providersdk.UnmanagedVM{}
	seen := map[string]int{}
	for _, vm := range list {
		seen[vm.ProviderID]++
		if vm.Location != "" {
			t.Errorf("ListVMs listed %s at %q, want no location", vm.ProviderID, vm.Location)
		}
		if _, ok := want[vm.ProviderID]; ok {
			got[vm.ProviderID] = vm
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListVMs (-want +got):\n%s", diff)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("ListVMs listed %s %d times", id, n)
		}
	}
	for name, id := range map[string]string{"the created domain": madeID, "the adopted domain": prefix + adopted.uuid} {
		if seen[id] > 0 {
			t.Errorf("ListVMs listed %s, %s", name, id)
		}
	}
	// Each domain listed, these and any other test's, is unclaimed for a machine adopting it.
	for _, vm := range list {
		o, err := s.Observe(ctx, adopting("list-check-"+uuid.NewString()[:8], vm.ProviderID))
		if err != nil || !o.Exists || !o.Unclaimed || o.ProviderID != vm.ProviderID || o.PowerState != vm.PowerState {
			t.Errorf("Observe of a machine adopting the listed %s = %+v, %v; want it unclaimed, %s", vm.ProviderID, o, err, vm.PowerState)
		}
	}
}
