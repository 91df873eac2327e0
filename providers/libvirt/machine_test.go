package libvirt

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

// TestQEMUMachineLifecycle runs one machine through create, stop, start, suspend and
// delete on qemu:///system, checking the host from a second connection.
func TestQEMUMachineLifecycle(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil, WithShutdownTimeout(time.Second))
	m := machine("web-1", func(m *providersdk.Machine) {
		m.UserData = []byte("#cloud-config\npackages: [nginx]\n")
		m.Spec.UserData = &banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "ud"}}
	})

	before := mustObserve(t, s, m)
	if before.Exists {
		t.Fatalf("before create: %+v", before)
	}
	if _, err := s.Create(ctx, m, before); err != nil {
		t.Fatalf("create: %v", err)
	}
	o := mustObserve(t, s, m)
	if dom, ok := o.State.(*host.Domain); !ok || dom.UUID != string(m.UID) {
		t.Errorf("the observation's state is %+v, want the machine's domain", o.State)
	}
	h, _ := s.hostInfo(ctx)
	rootVol, seedVol := string(m.UID)+"-root.qcow2", string(m.UID)+"-cidata.iso"
	want := providersdk.Observation{
		Exists: true, UpToDate: true, PowerState: banlieuev1.PowerStatePoweredOn, WaitingForGuest: true,
		ProviderID:    "libvirt://" + h.hostname + "/" + string(m.UID),
		FailureDomain: h.failureDomain,
		Hardware:      &providersdk.Hardware{CPUs: 1, MemoryMiB: 256, DiskBytes: []int64{2 * providersdk.GiB}},
	}
	details := o.Details
	if o.BootID == "" {
		t.Error("the running domain reports no boot ID")
	}
	o.Details, o.State, o.BootID = nil, nil, ""
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("after create (-want +got):\n%s", diff)
	}
	t.Run("the domain runs with the machine's UUID, name and metadata", func(t *testing.T) {
		inspect(t, d, func(l *libvirt.Libvirt) {
			if n := domainsNamed(t, l, "team-a.web-1"); n != 1 {
				t.Errorf("%d domains named team-a.web-1, want 1", n)
			}
			dom, err := l.DomainLookupByName("team-a.web-1")
			if err != nil {
				t.Fatal(err)
			}
			if st, _, _ := l.DomainGetState(dom, 0); libvirt.DomainState(st) != libvirt.DomainRunning {
				t.Errorf("state = %d, want running", st)
			}
			x := domainXML(t, l, "team-a.web-1")
			meta := metadataOf(t, x)
			if x.UUID != string(m.UID) || meta == nil || meta.UID != string(m.UID) {
				t.Fatalf("uuid %s, metadata %+v; want the machine's UID %s", x.UUID, meta, m.UID)
			}
			wantVols := []string{testPool + "/" + rootVol, testPool + "/" + seedVol}
			if diff := cmp.Diff(wantVols, meta.Volumes); diff != "" {
				t.Errorf("metadata volumes (-want +got):\n%s", diff)
			}
			wantDetails := &infrav1.LibvirtStatus{DomainUUID: string(m.UID), DomainName: "team-a.web-1", Volumes: wantVols}
			if diff := cmp.Diff(wantDetails, details); diff != "" {
				t.Errorf("details (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("the boot disk is a 2 GiB qcow2 overlay on the image", func(t *testing.T) {
		inspect(t, d, func(l *libvirt.Libvirt) {
			pool, _ := l.StoragePoolLookupByName(testPool)
			img, _ := l.StorageVolLookupByName(pool, testImage)
			imgPath, _ := l.StorageVolGetPath(img)
			v := volumeXML(t, l, rootVol)
			got := struct {
				Format, Backing, BackingFormat string
				Capacity                       uint64
			}{v.Target.Format.Type, "", "", v.Capacity.Value}
			if v.BackingStore != nil {
				got.Backing, got.BackingFormat = v.BackingStore.Path, v.BackingStore.Format.Type
			}
			wantVol := struct {
				Format, Backing, BackingFormat string
				Capacity                       uint64
			}{"qcow2", imgPath, "qcow2", 2 << 30}
			if diff := cmp.Diff(wantVol, got); diff != "" {
				t.Errorf("root volume (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("the seed ISO carries the user data and the machine's identity", func(t *testing.T) {
		inspect(t, d, func(l *libvirt.Libvirt) {
			files, label, err := nocloud.ReadISO(downloadVolume(t, l, seedVol))
			if err != nil {
				t.Fatal(err)
			}
			wantFiles := map[string][]byte{
				"user-data": []byte("#cloud-config\npackages: [nginx]\n"),
				"meta-data": []byte("instance-id: \"" + string(m.UID) + "\"\nlocal-hostname: \"web-1\"\n"),
			}
			if diff := cmp.Diff(wantFiles, files); diff != "" {
				t.Errorf("seed files (-want +got):\n%s", diff)
			}
			if label != "cidata" {
				t.Errorf("label %q, want cidata", label)
			}
		})
	})

	t.Run("a create whose observation missed the domain adopts it", func(t *testing.T) {
		// As after an Observe that ran before another process defined the domain.
		if _, err := s.Create(ctx, m, providersdk.Observation{}); err != nil {
			t.Fatal(err)
		}
		inspect(t, d, func(l *libvirt.Libvirt) {
			if n := domainsNamed(t, l, "team-a.web-1"); n != 1 {
				t.Errorf("%d domains, want 1", n)
			}
		})
	})

	t.Run("powering off shuts down, then destroys a guest that ignores ACPI", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		res, err := updateMachine(ctx, s, m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Task.Ref, shutdownTaskPrefix) {
			t.Fatalf("task %+v, want a shutdown task", res.Task)
		}
		m.Task = res.Task
		m.Task.StartedAt = time.Now()
		if o := mustObserve(t, s, m); o.Task != m.Task || o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("while shutting down: task %+v, power %s", o.Task, o.PowerState)
		}
		time.Sleep(1100 * time.Millisecond)
		if o := mustObserve(t, s, m); o.Task.InFlight() {
			t.Errorf("after the timeout the task is still in flight")
		}
		if _, err := updateMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		m.Task = providersdk.Task{}
		if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOff || !o.UpToDate {
			t.Errorf("after destroy: power %s, up to date %v", o.PowerState, o.UpToDate)
		}
	})

	t.Run("a shutdown asked of one boot is over once the domain runs the next", func(t *testing.T) {
		// As in a restart: the guest shut down and the domain was started again, before
		// the shutdown timeout.
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		powerTo(t, s, m, banlieuev1.PowerStatePoweredOn) // started, its boot marked
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOff
		res, err := updateMachine(ctx, s, m)
		if err != nil {
			t.Fatal(err)
		}
		m.Task = res.Task
		m.Task.StartedAt = time.Now()
		if o := mustObserve(t, s, m); o.Task != m.Task {
			t.Fatalf("while the same boot runs: task %+v, want %+v", o.Task, m.Task)
		}
		inspect(t, d, func(l *libvirt.Libvirt) {
			dom, err := l.DomainLookupByName("team-a.web-1")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.DomainDestroy(dom); err != nil {
				t.Fatal(err)
			}
			if err := l.DomainCreate(dom); err != nil {
				t.Fatal(err)
			}
		})
		// Within the timeout still, however long the power cycle took here.
		m.Task.StartedAt = time.Now()
		if o := mustObserve(t, s, m); o.Task.InFlight() || o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("in the next boot: task %+v, power %s; want no task, PoweredOn", o.Task, o.PowerState)
		}
		// The new boot's shutdown is a task of its own, and ends as the first did.
		res, err = updateMachine(ctx, s, m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Task.Ref == m.Task.Ref {
			t.Errorf("the next boot's shutdown has the first's task %s", res.Task.Ref)
		}
		m.Task = res.Task
		m.Task.StartedAt = time.Now().Add(-time.Minute) // the blank guest ignores ACPI
		if _, err := updateMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		m.Task = providersdk.Task{}
		if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOff {
			t.Fatalf("after the timeout: power %s, want PoweredOff", o.PowerState)
		}
	})

	t.Run("a shut-off domain is resized and gets its new disk", func(t *testing.T) {
		m.Spec.Hardware.CPUs, m.Spec.Hardware.MemoryMiB = 2, 320
		m.Spec.Disks = append(m.Spec.Disks, m.Spec.Disks[0])
		m.Spec.Disks[1].Name, m.Spec.Disks[1].SizeGiB = "data", 1
		if o := mustObserve(t, s, m); o.UpToDate {
			t.Fatal("the changed spec is reported up to date")
		}
		if _, err := updateMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		if o := mustObserve(t, s, m); !o.UpToDate {
			t.Error("after the update the domain is not up to date")
		}
	})

	t.Run("suspending starts, then saves the domain to disk", func(t *testing.T) {
		m.Spec.PowerState = banlieuev1.PowerStateSuspended
		for range 2 {
			if _, err := updateMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
		}
		if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStateSuspended || !o.UpToDate {
			t.Errorf("power %s, up to date %v", o.PowerState, o.UpToDate)
		}
		m.Spec.PowerState = banlieuev1.PowerStatePoweredOn
		if _, err := updateMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("after resume: power %s", o.PowerState)
		}
	})

	t.Run("a running domain's resize waits for its next power cycle", func(t *testing.T) {
		if _, err := updateMachine(ctx, s, m); err != nil { // the boot ID of the resumed domain
			t.Fatal(err)
		}
		m.Spec.Hardware.CPUs = 3
		defer func() { m.Spec.Hardware.CPUs = 2 }()
		o := mustObserve(t, s, m)
		if !o.UpToDate || !cmp.Equal(o.PendingRestart, []string{"CPUs from 2 to 3"}) {
			t.Fatalf("up to date %v, pending %q; want up to date with the CPUs pending", o.UpToDate, o.PendingRestart)
		}
		if res, err := s.Update(ctx, m, o); err != nil || res.Task.InFlight() {
			t.Fatalf("Update = %+v, %v; want nothing done to a running domain", res, err)
		}
		if dom := domainOf(mustObserve(t, s, m)); dom.CPUs != 2 {
			t.Errorf("the running domain has %d CPUs, want 2 until its next power cycle", dom.CPUs)
		}

		// Its boot disk grows at once, through QEMU; the CPUs still wait.
		m.Spec.Disks[0].SizeGiB++
		defer func() { m.Spec.Disks[0].SizeGiB-- }()
		if o := mustObserve(t, s, m); o.UpToDate || !cmp.Equal(o.PendingRestart, []string{"CPUs from 2 to 3"}) {
			t.Fatalf("with a larger disk: up to date %v, pending %q; want the growth to make now", o.UpToDate, o.PendingRestart)
		}
		if _, err := updateMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		o = mustObserve(t, s, m)
		if want := int64(m.Spec.Disks[0].SizeGiB) * providersdk.GiB; !o.UpToDate || domainOf(o).DiskBytes[0] != want || o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("after the online growth: up to date %v, disk %d bytes (want %d), %s", o.UpToDate, domainOf(o).DiskBytes[0], want, o.PowerState)
		}
	})

	t.Run("delete leaves no domain and no volume of the machine", func(t *testing.T) {
		for range 2 { // the second delete finds nothing and succeeds
			if err := deleteMachine(ctx, s, m); err != nil {
				t.Fatal(err)
			}
		}
		if o := mustObserve(t, s, m); o.Exists {
			t.Error("the domain still exists")
		}
		inspect(t, d, func(l *libvirt.Libvirt) {
			if n := domainsNamed(t, l, "team-a.web-1"); n != 0 {
				t.Errorf("%d domains left", n)
			}
			if vols := machineVolumes(t, l, m); len(vols) > 0 {
				t.Errorf("volumes left: %v", vols)
			}
			pool, _ := l.StoragePoolLookupByName(testPool)
			if _, err := l.StorageVolLookupByName(pool, testImage); err != nil {
				t.Errorf("the image volume is gone: %v", err)
			}
		})
	})
}

// TestAMachineWithoutUserDataGetsASeedOfItsIdentity: a machine with neither user data
// nor static addresses still gets a NoCloud seed, whose meta-data gives cloud-init the
// machine's instance ID and host name (without a data source the guest stays
// "localhost"); deletion removes it with the disks.
func TestAMachineWithoutUserDataGetsASeedOfItsIdentity(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	m := machine("bare")
	if err := createMachine(ctx, s, m); err != nil {
		t.Fatalf("create: %v", err)
	}
	seedVol := string(m.UID) + "-cidata.iso"
	inspect(t, d, func(l *libvirt.Libvirt) {
		files, label, err := nocloud.ReadISO(downloadVolume(t, l, seedVol))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{
			"user-data": {},
			"meta-data": []byte("instance-id: \"" + string(m.UID) + "\"\nlocal-hostname: \"bare\"\n"),
		}
		if diff := cmp.Diff(want, files, cmpopts.EquateEmpty()); diff != "" || label != "cidata" {
			t.Errorf("seed %q, files (-want +got):\n%s", label, diff)
		}
		x := domainXML(t, l, "team-a.bare")
		var cdroms []string
		for _, disk := range x.Devices.Disks {
			if disk.Device == "cdrom" && disk.Source != nil && disk.Source.Volume != nil {
				cdroms = append(cdroms, disk.Source.Volume.Volume)
			}
		}
		if !cmp.Equal(cdroms, []string{seedVol}) {
			t.Errorf("the domain's CD-ROMs are %q, want the seed", cdroms)
		}
		if meta := metadataOf(t, x); meta == nil || !slices.Contains(meta.Volumes, testPool+"/"+seedVol) {
			t.Errorf("the domain's metadata %+v does not list the seed for deletion", meta)
		}
	})
	if err := deleteMachine(ctx, s, m); err != nil {
		t.Fatal(err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		if vols := machineVolumes(t, l, m); len(vols) > 0 {
			t.Errorf("volumes left: %v", vols)
		}
	})
}

// downloadVolume reads the volume name of the test pool.
func downloadVolume(t *testing.T, l *libvirt.Libvirt, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := l.StorageVolDownload(testVolume(t, l, name), &buf, 0, 0, 0); err != nil {
		t.Fatalf("download: %v", err)
	}
	return buf.Bytes()
}

func TestADomainTheHypervisorStoppedIsReportedNotResumed(t *testing.T) {
	d := daemon(t)
	ctx := t.Context()
	s := connect(t, d.QEMUURI(), nil)
	m := machine("crashy")
	if err := createMachine(ctx, s, m); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = deleteMachine(context.Background(), s, m) })
	// QEMU stops the guest behind libvirt's back, as it does on a guest crash or a KVM
	// failure: libvirt sees a pause it did not ask for.
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, err := l.DomainLookupByName("team-a.crashy")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.QEMUDomainMonitorCommand(dom, `{"execute":"stop"}`, 0); err != nil {
			t.Fatal(err)
		}
	})
	o := mustObserve(t, s, m)
	_, err := s.Update(ctx, m, o)
	if !providersdk.IsPermanent(err) || !strings.Contains(err.Error(), "the hypervisor stopped domain team-a.crashy") {
		t.Fatalf("Update = %v, want a permanent GuestStopped error", err)
	}
	inspect(t, d, func(l *libvirt.Libvirt) {
		dom, _ := l.DomainLookupByName("team-a.crashy")
		if st, _, _ := l.DomainGetState(dom, 0); libvirt.DomainState(st) != libvirt.DomainPaused {
			t.Errorf("state = %d, want it left paused", st)
		}
	})
}

// TestAPauseLibvirtIsStillDoingIsWaitedFor covers the provider restarted while libvirt
// starts a domain: QEMU is paused until set up (reason "starting up"), and Update waits
// instead of failing the machine as if the guest had crashed.
func TestAPauseLibvirtIsStillDoingIsWaitedFor(t *testing.T) {
	s := &session{}
	m := machine("starting")
	for _, tc := range []struct {
		name     string
		dom      host.Domain
		want     banlieuev1.PowerState
		inFlight bool
	}{
		{"starting up, to run", host.Domain{State: host.StatePaused, Reason: 11, PausedInTransit: true}, banlieuev1.PowerStatePoweredOn, true},
		{"saving, to suspend", host.Domain{State: host.StatePaused, Reason: 3, PausedInTransit: true}, banlieuev1.PowerStateSuspended, true},
		{"crashed, to run", host.Domain{State: host.StatePaused, Reason: 10}, banlieuev1.PowerStatePoweredOn, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.setPower(t.Context(), m, &tc.dom, tc.want)
			if got := providersdk.IsInFlight(err); got != tc.inFlight {
				t.Fatalf("setPower = %v; in flight %v, want %v", err, got, tc.inFlight)
			}
			if !tc.inFlight && !providersdk.IsPermanent(err) {
				t.Fatalf("setPower = %v, want a permanent GuestStopped error", err)
			}
		})
	}
}
