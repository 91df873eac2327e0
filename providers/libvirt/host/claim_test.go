package host

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// foreignXML is a domain banlieue did not make: a pool volume, a file, a read-only and a
// shareable pool volume, and an installer ISO from a pool.
const foreignXML = `<domain type="qemu"><name>f</name><uuid>9b2e0f4a-7a8c-4d1e-9f3b-2c5d6e7f8a9b</uuid>
<memory unit="MiB">192</memory><vcpu>2</vcpu><os><type arch="x86_64">hvm</type></os><devices>
<disk type="volume" device="disk"><source pool="default" volume="root.qcow2"/><target dev="vda" bus="virtio"/></disk>
<disk type="file" device="disk"><source file="/srv/data.img"/><target dev="vdb" bus="virtio"/></disk>
<disk type="volume" device="disk"><source pool="default" volume="base.qcow2"/><target dev="vdc" bus="virtio"/><readonly/></disk>
<disk type="volume" device="disk"><source pool="san" volume="cluster.raw"/><target dev="vdd" bus="virtio"/><shareable/></disk>
<disk type="volume" device="cdrom"><source pool="isos" volume="debian.iso"/><target dev="sda" bus="sata"/><readonly/></disk>
</devices></domain>`

func TestOwnVolumesAreTheDomainsWritableUnsharedPoolDisks(t *testing.T) {
	got, err := ownVolumes(foreignXML)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"default/root.qcow2"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseDomainCountsDisksThatAreNoPoolVolume(t *testing.T) {
	d, err := parseDomain(foreignXML)
	if err != nil {
		t.Fatal(err)
	}
	if d.DiskDevices != 4 || len(d.Disks) != 3 {
		t.Errorf("%d disk devices, %d pool volume disks (%v); want 4 and 3", d.DiskDevices, len(d.Disks), d.Disks)
	}
}
