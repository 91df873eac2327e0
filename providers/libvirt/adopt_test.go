package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"libvirt.org/go/libvirtxml"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// foreignMAC is the MAC of the NIC of the domains defined outside banlieue.
const foreignMAC = "52:54:00:ad:0b:01"

// foreignDomain is a domain defined, and maybe started, through libvirt directly, as
// someone other than banlieue would: 2 vCPUs, 192 MiB, a root volume of its own, a
// read-only volume it shares, a NIC and another tool's metadata element.
type foreignDomain struct {
	name, uuid   string
	root, shared string
}

// Another tool's metadata element on foreign domains, which adoption must keep.
const otherMetadataNS, otherMetadata = "https://example.com/inventory", `<asset>rack 9</asset>`

// defineForeign defines a foreign domain and starts it when running; it is removed,
// with its volumes, when the test ends.
func defineForeign(t *testing.T, d *libvirtd.Daemon, running bool) foreignDomain {
	t.Helper()
	suffix := uuid.NewString()[:8]
	f := foreignDomain{name: "foreign-" + suffix, uuid: uuid.NewString(), root: "foreign-" + suffix + "-root.qcow2", shared: "foreign-" + suffix + "-shared.qcow2"}
	disk := func(vol, dev string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
			Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: testPool, Volume: vol}},
			Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: "virtio"},
		}
	}
	shared := disk(f.shared, "vdb")
	shared.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	x, err := (&libvirtxml.Domain{
		Type: TCG, Name: f.name, UUID: f.uuid,
		Memory:        &libvirtxml.DomainMemory{Value: 192, Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: 192, Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
		OS:            &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{disk(f.root, "vda"), shared},
			Interfaces: []libvirtxml.DomainInterface{{
				Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: testNetwork}},
				MAC:    &libvirtxml.DomainInterfaceMAC{Address: foreignMAC},
				Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
			}},
		},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		for _, v := range []string{f.root, f.shared} {
			if err := libvirtd.CreateBlankImageOn(l, testPool, v, 1); err != nil {
				t.Fatal(err)
			}
		}
		dom, err := l.DomainDefineXMLFlags(x, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{otherMetadata},
			libvirt.OptString{"inv"}, libvirt.OptString{otherMetadataNS}, libvirt.DomainAffectConfig); err != nil {
			t.Fatal(err)
		}
		if running {
			if err := l.DomainCreate(dom); err != nil {
				t.Fatalf("start the foreign domain: %v", err)
			}
		}
	})
	t.Cleanup(func() {
		inspect(t, d, func(l *libvirt.Libvirt) {
			if dom, err := l.DomainLookupByName(f.name); err == nil {
				_ = l.DomainDestroy(dom)
				_ = l.DomainUndefine(dom)
			}
			if pool, err := l.StoragePoolLookupByName(testPool); err == nil {
				for _, v := range []string{f.root, f.shared} {
					if vol, err := l.StorageVolLookupByName(pool, v); err == nil {
						_ = l.StorageVolDelete(vol, 0)
					}
				}
			}
		})
	})
	return f
}

// adopting is a machine that adopts the domain providerID names, with the foreign
// domains' hardware and no image, NIC or user data, as core makes one.
func adopting(name, providerID string) *providersdk.Machine {
	return machine(name, func(m *providersdk.Machine) {
		m.Spec.AdoptProviderID = providerID
		m.Spec.Image = infrav1.MachineImage{}
		m.Spec.Hardware = infrav1.MachineHardware{CPUs: 2, MemoryMiB: 192}
		m.Spec.Disks = []infrav1.MachineDisk{{Name: "root", SizeGiB: 1, StorageClass: "fast", Target: map[string]string{TargetPool: testPool}}}
		m.Spec.Interfaces = nil
	})
}

// mustVirsh runs virsh and fails the test when it fails.
func mustVirsh(t *testing.T, d *libvirtd.Daemon, args ...string) string {
	t.Helper()
	out, err := d.Virsh(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// virshMark is banlieue's element of domain's metadata as virsh reads it from part
// (--live or --config); nil, with virsh's error, when there is none.
func virshMark(t *testing.T, d *libvirtd.Daemon, domain, part string) (*struct {
	UID     string   `xml:"uid"`
	Volumes []string `xml:"volume"`
}, error) {
	t.Helper()
	out, err := d.Virsh("metadata", domain, "--uri", MetadataNamespace, part)
	if err != nil {
		return nil, err
	}
	var el struct {
		UID     string   `xml:"uid"`
		Volumes []string `xml:"volume"`
	}
	if err := xml.Unmarshal([]byte(out), &el); err != nil {
		t.Fatalf("virsh's metadata %q does not parse: %v", out, err)
	}
	return &el, nil
}

// hardwareXML is what adoption must not change of a domain: its inactive definition
// without its metadata.
func hardwareXML(t *testing.T, d *libvirtd.Daemon, name string) *libvirtxml.Domain {
	t.Helper()
	var def *libvirtxml.Domain
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByName(name)
		if err != nil {
			t.Fatal(err)
		}
		x, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
		if err != nil {
			t.Fatal(err)
		}
		def = &libvirtxml.Domain{}
		if err := def.Unmarshal(x); err != nil {
			t.Fatal(err)
		}
	})
	def.Metadata = nil
	return def
}

// retryableReason is the reason of err's RetryableError; "" when it has none.
func retryableReason(err error) string {
	var r *providersdk.RetryableError
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// permanentReason is the reason of err's PermanentError; "" when it has none.
func permanentReason(err error) string {
	var p *providersdk.PermanentError
	if errors.As(err, &p) {
		return p.Reason
	}
	return ""
}

// TestAdoptADomainDefinedOutsideBanlieue adopts a running and a shut-off domain that
// libvirt, not the driver, defined: the mark is written where the domain keeps it, and
// nothing else changes; then the running one is released and the shut-off one deleted.
func TestAdoptADomainDefinedOutsideBanlieue(t *testing.T) {
	d := daemon(t)
	tests := []struct {
		name    string
		running bool
		// parts are where the domain keeps its metadata, as virsh names them.
		parts []string
		state string
		// pending are the changes a machine asking for 3 vCPUs waits for.
		pending []string
	}{
		{name: "running", running: true, parts: []string{"--live", "--config"}, state: "running", pending: []string{"CPUs from 2 to 3"}},
		{name: "shut off", running: false, parts: []string{"--config"}, state: "shut off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := connect(t, d.QEMUURI(), nil)
			f := defineForeign(t, d, tt.running)
			prefix := s.ProviderIDPrefix()
			if want := "libvirt://" + mustVirsh(t, d, "hostname") + "/"; prefix != want {
				t.Fatalf("ProviderIDPrefix = %q, want %q", prefix, want)
			}
			id := prefix + f.uuid
			m := adopting("adopter-"+f.name, id)
			m.ClusterID = "cluster-a"
			if !tt.running {
				m.Spec.PowerState = banlieuev1.PowerStatePoweredOff // as core copies it from the VM
			}
			beforeID, beforeHW := mustVirsh(t, d, "domid", f.uuid), hardwareXML(t, d, f.name)
			if tt.running && beforeID == "-" {
				t.Fatal("the foreign domain does not run")
			}

			o := mustObserve(t, s, m)
			want := providersdk.Observation{Exists: true, Unclaimed: true, ProviderID: id, PowerState: banlieuev1.PowerStatePoweredOff}
			if tt.running {
				want.PowerState = banlieuev1.PowerStatePoweredOn
			}
			if diff := cmp.Diff(want, o, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".State" }, cmp.Ignore())); diff != "" {
				t.Errorf("Observe before the adoption (-want +got):\n%s", diff)
			}
			if _, err := s.Adopt(ctx, m, o); err != nil {
				t.Fatalf("Adopt: %v", err)
			}

			o = mustObserve(t, s, m)
			if !o.Exists || o.Unclaimed || o.ProviderID != id || o.PowerState != want.PowerState {
				t.Errorf("Observe after the adoption: exists %v, unclaimed %v, providerID %q, power %s; want the domain as the machine's, %s",
					o.Exists, o.Unclaimed, o.ProviderID, o.PowerState, want.PowerState)
			}
			// The orphan listing tells it from a domain banlieue made: never deleted as an orphan.
			marked, err := s.ListMarked(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantMarked := providersdk.MarkedVM{ProviderID: id, Name: f.name, MachineUID: m.UID,
				Machine: k8stypes.NamespacedName{Namespace: m.Namespace, Name: m.Name}, ClusterID: "cluster-a", Adopted: true}
			if !slices.Contains(marked, wantMarked) {
				t.Errorf("ListMarked = %+v, want %+v among them", marked, wantMarked)
			}
			if tt.running {
				// As the Reconciler would: a running domain's boot gets its ID, in the live
				// definition only, and nothing else happens.
				if _, err := s.Update(ctx, m, o); err != nil {
					t.Fatalf("Update: %v", err)
				}
				o = mustObserve(t, s, m)
			}
			details, _ := o.Details.(*infrav1.LibvirtStatus)
			gotVolumes := []string(nil)
			if details != nil {
				gotVolumes = details.Volumes
			}
			if !o.UpToDate || len(o.PendingRestart) > 0 || tt.running != (o.BootID != "") {
				t.Errorf("Observe of the adopted domain: up to date %v, pending %v, boot ID %q; want up to date, with a boot ID when running",
					o.UpToDate, o.PendingRestart, o.BootID)
			}
			if diff := cmp.Diff([]string{testPool + "/" + f.root}, gotVolumes); diff != "" {
				t.Errorf("recorded volumes (-want +got):\n%s", diff)
			}
			// Observe reads the real vCPUs: a machine asking for more waits for them.
			m.Spec.Hardware.CPUs = 3
			o3 := mustObserve(t, s, m)
			// Running, the change waits for a power cycle and the domain is up to date;
			// shut off, Update would make it, so the domain is not.
			if diff := cmp.Diff(tt.pending, o3.PendingRestart); diff != "" || o3.UpToDate != tt.running {
				t.Errorf("Observe with 3 vCPUs asked: up to date %v, want %v; pending (-want +got):\n%s", o3.UpToDate, tt.running, diff)
			}
			m.Spec.Hardware.CPUs = 2

			// The witness: virsh reads the mark where the domain keeps it, and the same
			// domain, state and definition as before.
			for _, part := range tt.parts {
				mark, err := virshMark(t, d, f.uuid, part)
				if err != nil || mark.UID != string(m.UID) || !slices.Equal(mark.Volumes, []string{testPool + "/" + f.root}) {
					t.Errorf("virsh metadata %s: %+v, %v; want UID %s and the root volume", part, mark, err, m.UID)
				}
			}
			if got := mustVirsh(t, d, "domid", f.uuid); got != beforeID {
				t.Errorf("domain ID %s, was %s: the domain was restarted", got, beforeID)
			}
			if got := mustVirsh(t, d, "domstate", f.uuid); got != tt.state {
				t.Errorf("domain state %q, want %q", got, tt.state)
			}
			if diff := cmp.Diff(beforeHW, hardwareXML(t, d, f.name)); diff != "" {
				t.Errorf("the domain's definition changed (-before +after):\n%s", diff)
			}
			if got := mustVirsh(t, d, "metadata", f.uuid, "--uri", otherMetadataNS, "--config"); got != otherMetadata {
				t.Errorf("the other tool's metadata: %q, want %q", got, otherMetadata)
			}

			if tt.running {
				// Retain: the mark goes, the domain stays defined and running.
				m.Deleting, m.Spec.DeletionPolicy = true, banlieuev1.DeletionPolicyRetain
				if _, err := s.Release(ctx, m, mustObserve(t, s, m)); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if o := mustObserve(t, s, m); o.Exists {
					t.Errorf("Observe after the release: %+v, want nothing", o)
				}
				for _, part := range tt.parts {
					if mark, err := virshMark(t, d, f.uuid, part); err == nil {
						t.Errorf("virsh metadata %s after the release: %+v, want none", part, mark)
					}
				}
				if got := mustVirsh(t, d, "domid", f.uuid); got != beforeID {
					t.Errorf("domain ID after the release %s, was %s", got, beforeID)
				}
				if got := mustVirsh(t, d, "domstate", f.uuid); got != tt.state {
					t.Errorf("domain state after the release %q, want %q", got, tt.state)
				}
				return
			}
			// Delete: the domain goes with the volume it was adopted with; the volume it
			// shares, read-only, stays.
			m.Deleting = true
			if _, err := s.Delete(ctx, m, mustObserve(t, s, m)); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if o := mustObserve(t, s, m); o.Exists {
				t.Errorf("Observe after the delete: %+v, want nothing", o)
			}
			if out, err := d.Virsh("domstate", f.uuid); err == nil {
				t.Errorf("the domain survived its deletion: %s", out)
			}
			vols := mustVirsh(t, d, "vol-list", testPool)
			if strings.Contains(vols, f.root) || !strings.Contains(vols, f.shared) {
				t.Errorf("volumes after the delete, want %s gone and %s kept:\n%s", f.root, f.shared, vols)
			}
		})
	}
}

// TestTwoMachinesAdoptOneDomainAtOnce races two machines adopting one domain, 20 times,
// through one session (one provider process: the loser's Adopt, or the Observe after
// it, says AlreadyManaged) and through two (two installations: the loser learns it at
// the latest from the Observe after the race).
func TestTwoMachinesAdoptOneDomainAtOnce(t *testing.T) {
	d := daemon(t)
	f := defineForeign(t, d, false)
	for _, sessions := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d sessions", sessions), func(t *testing.T) {
			ctx := t.Context()
			ss := []*session{connect(t, d.QEMUURI(), nil)}
			if sessions == 2 {
				ss = append(ss, connect(t, d.QEMUURI(), nil))
			}
			id := ss[0].ProviderIDPrefix() + f.uuid
			l, err := d.Connect("qemu:///system")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Disconnect() }()
			dom, err := l.DomainLookupByUUID(libvirt.UUID(uuid.MustParse(f.uuid)))
			if err != nil {
				t.Fatal(err)
			}
			for round := range 20 {
				ms := []*providersdk.Machine{adopting("a", id), adopting("b", id)}
				errs := make([]error, len(ms))
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, m := range ms {
					wg.Go(func() {
						s := ss[i%len(ss)]
						<-start
						o, err := s.Observe(ctx, m)
						if err == nil && o.Unclaimed {
							_, err = s.Adopt(ctx, m, o)
						}
						if err == nil {
							o, err = s.Observe(ctx, m)
						}
						if err == nil && (!o.Exists || o.Unclaimed) {
							err = fmt.Errorf("after Adopt the domain is not the machine's: %+v", o)
						}
						errs[i] = err
					})
				}
				close(start)
				wg.Wait()
				if sessions == 2 {
					// Two installations are not serialized: both may write, and the last
					// writer wins. A loser whose Observe came before the winner's write
					// finds the winner's mark on its next one.
					for i, m := range ms {
						if errs[i] == nil {
							_, errs[i] = ss[i].Observe(ctx, m)
						}
					}
				}
				x, err := l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{MetadataNamespace}, libvirt.DomainAffectConfig)
				if err != nil {
					t.Fatalf("round %d: the domain carries no mark: %v", round, err)
				}
				var mark struct {
					UID string `xml:"uid"`
				}
				if err := xml.Unmarshal([]byte(x), &mark); err != nil {
					t.Fatal(err)
				}
				var won []int
				for i, err := range errs {
					switch {
					case err == nil:
						won = append(won, i)
					case retryableReason(err) != infrav1.MachineAlreadyManagedReason:
						t.Errorf("round %d: machine %s: %v, want success or AlreadyManaged", round, ms[i].Name, err)
					}
				}
				if len(won) != 1 || mark.UID != string(ms[won[0]].UID) {
					t.Fatalf("round %d: machines %v won, the mark names %s; want exactly one winner, named by the mark (errors %v)", round, won, mark.UID, errs)
				}
				if err := l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{}, libvirt.OptString{},
					libvirt.OptString{MetadataNamespace}, libvirt.DomainAffectConfig); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAdoptRefusesWhatItCannotAdopt feeds Observe and Adopt IDs of other forms, a domain
// that does not exist and one another machine adopted, for live and deleted machines.
func TestAdoptRefusesWhatItCannotAdopt(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	prefix := s.ProviderIDPrefix()
	free, taken := defineForeign(t, d, false), defineForeign(t, d, false)
	other := adopting("first-owner-7f3a", prefix+taken.uuid)
	if _, err := s.Adopt(ctx, other, mustObserve(t, s, other)); err != nil {
		t.Fatal(err)
	}
	// A's Observe comes before B's adoption, its Adopt after it.
	late := adopting("late", prefix+free.uuid)
	stale := mustObserve(t, s, late)
	first := adopting("first", prefix+free.uuid)
	if _, err := s.Adopt(ctx, first, mustObserve(t, s, first)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Adopt(ctx, late, stale); retryableReason(err) != infrav1.MachineAlreadyManagedReason {
		t.Errorf("Adopt with an Observe from before another machine's adoption: %v, want AlreadyManaged", err)
	}
	unmarked := defineForeign(t, d, false)
	hostName := strings.TrimSuffix(strings.TrimPrefix(prefix, "libvirt://"), "/")

	tests := []struct {
		name     string
		id       string
		deleting bool
		// reason is the error's; "" for none, when Observe must find nothing.
		reason string
	}{
		{name: "no domain has the UUID", id: prefix + uuid.NewString()},
		{name: "another host", id: "libvirt://not-" + hostName + "/" + free.uuid, reason: infrav1.MachineAdoptionTargetInvalidReason},
		{name: "another scheme", id: "vsphere://" + free.uuid, reason: infrav1.MachineAdoptionTargetInvalidReason},
		{name: "a malformed UUID", id: prefix + "not-a-uuid", reason: infrav1.MachineAdoptionTargetInvalidReason},
		{name: "an uppercase UUID", id: prefix + strings.ToUpper(free.uuid), reason: infrav1.MachineAdoptionTargetInvalidReason},
		{name: "no UUID", id: "libvirt://" + hostName, reason: infrav1.MachineAdoptionTargetInvalidReason},
		{name: "a domain another machine adopted", id: prefix + taken.uuid, reason: infrav1.MachineAlreadyManagedReason},
		{name: "deleted, its domain unmarked", id: prefix + unmarked.uuid, deleting: true},
		{name: "deleted, its domain another machine's", id: prefix + taken.uuid, deleting: true},
		{name: "released, its domain unmarked", id: prefix + unmarked.uuid, deleting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := adopting("bad", tt.id)
			m.Deleting = tt.deleting
			if strings.HasPrefix(tt.name, "released") {
				m.Spec.DeletionPolicy = banlieuev1.DeletionPolicyRetain
			}
			o, err := s.Observe(ctx, m)
			switch tt.reason {
			case "":
				if err != nil || !cmp.Equal(providersdk.Observation{}, o) {
					t.Errorf("Observe: %+v, %v; want nothing found", o, err)
				}
			case infrav1.MachineAlreadyManagedReason:
				if retryableReason(err) != tt.reason || o.Exists {
					t.Errorf("Observe: %+v, %v; want AlreadyManaged", o, err)
				}
				if strings.Contains(fmt.Sprint(err), string(other.UID)) || strings.Contains(fmt.Sprint(err), other.Name) {
					t.Errorf("AlreadyManaged names the other machine: %v", err)
				}
			default:
				if permanentReason(err) != tt.reason || o.Exists {
					t.Errorf("Observe: %+v, %v; want %s", o, err, tt.reason)
				}
			}
		})
	}
	// Nothing above marked the unmarked domain or moved the other's mark.
	if mark, err := virshMark(t, d, unmarked.uuid, "--config"); err == nil {
		t.Errorf("the unmarked domain carries %+v", mark)
	}
	if mark, err := virshMark(t, d, taken.uuid, "--config"); err != nil || mark.UID != string(other.UID) {
		t.Errorf("the adopted domain's mark: %+v, %v; want the other machine's", mark, err)
	}
}

// TestAdoptedHardwareLeavesDisksOfUnknownSourceAlone compares an adopted domain's disks
// only when every one is a pool volume: no volume is attached in place of a file disk.
func TestAdoptedHardwareLeavesDisksOfUnknownSourceAlone(t *testing.T) {
	spec := infrav1.MachineSpec{
		AdoptProviderID: "libvirt://h/9b2e0f4a-7a8c-4d1e-9f3b-2c5d6e7f8a9b",
		Hardware:        infrav1.MachineHardware{CPUs: 2, MemoryMiB: 192},
		Disks:           []infrav1.MachineDisk{{Name: "root", SizeGiB: 2}, {Name: "data", SizeGiB: 2}},
	}
	vol := host.VolumeRef{Pool: testPool, Name: "root.qcow2"}
	tests := []struct {
		name string
		dom  host.Domain
		want []providersdk.ChangeKind
	}{
		{name: "pool volumes only", dom: host.Domain{Disks: []host.VolumeRef{vol}, DiskBytes: []int64{providersdk.GiB}, DiskDevices: 1},
			want: []providersdk.ChangeKind{providersdk.ChangeDiskGrow, providersdk.ChangeDiskAdd}},
		{name: "a file disk beside", dom: host.Domain{Disks: []host.VolumeRef{vol}, DiskBytes: []int64{providersdk.GiB}, DiskDevices: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.dom.CPUs, tt.dom.MemoryMiB = 2, 192
			var got []providersdk.ChangeKind
			for _, c := range providersdk.HardwareDiff(spec, hardwareOf(&providersdk.Machine{Spec: spec}, &tt.dom)) {
				got = append(got, c.Kind)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}
