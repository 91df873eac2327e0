package vspheresim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

func TestTheSimulatorServesTemplatesAndGuestsThatReportAnAddress(t *testing.T) {
	s := start(t, Options{GuestAddressDelay: 10 * time.Millisecond})
	ctx := context.Background()
	c, err := s.Client(ctx) // verifies the certificate against CACert
	if err != nil {
		t.Fatal(err)
	}
	finder := find.NewFinder(c.Client, true)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	finder.SetDatacenter(dc)
	tpl, err := finder.VirtualMachine(ctx, DefaultTemplate)
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	var props mo.VirtualMachine
	if err := tpl.Properties(ctx, tpl.Reference(), []string{"config.template"}, &props); err != nil || !props.Config.Template {
		t.Fatalf("ubuntu-22.04 is not a template (err %v)", err)
	}

	pool, err := finder.DefaultResourcePool(ctx)
	if err != nil {
		pools, _ := finder.ResourcePoolList(ctx, "*")
		if len(pools) == 0 {
			t.Fatal("no resource pool")
		}
		pool = pools[0]
	}
	folders, err := finder.DefaultFolder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := pool.Reference()
	task, err := tpl.Clone(ctx, folders, "vm-1", types.VirtualMachineCloneSpec{Location: types.VirtualMachineRelocateSpec{Pool: &ref}, PowerOn: true})
	if err != nil {
		t.Fatal(err)
	}
	info, err := task.WaitForResult(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vm := object.NewVirtualMachine(c.Client, info.Result.(types.ManagedObjectReference))
	ip, err := waitForIP(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if !guestAddresses.Contains(netip.MustParseAddr(ip)) {
		t.Errorf("guest address %s is outside %s", ip, guestAddresses)
	}

	// Powered off, the guest reports no address.
	if task, err = vm.PowerOff(ctx); err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ip != "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		ip = guestIP(ctx, vm)
	}
	if ip != "" {
		t.Errorf("a powered-off guest still reports %s", ip)
	}

	s.Down()
	if _, err := s.Client(ctx); err == nil {
		t.Fatal("logged in to a simulator that is down")
	}
	if err := s.Up(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client(ctx); err != nil {
		t.Fatalf("after Up: %v", err)
	}

	// The guests outlive an outage: powered on again, the VM gets an address.
	if task, err = vm.PowerOn(ctx); err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitForIP(ctx, vm); err != nil {
		t.Fatalf("no guest address after Down and Up: %v", err)
	}
}

// TestGuestsReportAddressesWhileVMsAreCloned clones VMs in parallel while their guests
// report addresses, as a Provider creating many machines does: a watch on a container
// view once deadlocked govmomi's simulator here, and every VM waited for its address.
func TestGuestsReportAddressesWhileVMsAreCloned(t *testing.T) {
	s := start(t, Options{GuestAddressDelay: 10 * time.Millisecond})
	ctx := t.Context()
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	finder := find.NewFinder(c.Client, true)
	dc, err := finder.Datacenter(ctx, Datacenter)
	if err != nil {
		t.Fatal(err)
	}
	finder.SetDatacenter(dc)
	tpl, err := finder.VirtualMachine(ctx, DefaultTemplate)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := finder.DefaultFolder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := finder.ResourcePoolList(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	pool := pools[0].Reference()
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			task, err := tpl.Clone(ctx, folder, fmt.Sprintf("clone-%d", i), types.VirtualMachineCloneSpec{Location: types.VirtualMachineRelocateSpec{Pool: &pool}, PowerOn: true})
			if err != nil {
				errs <- err
				return
			}
			info, err := task.WaitForResult(ctx)
			if err != nil {
				errs <- err
				return
			}
			_, err = waitForIP(ctx, object.NewVirtualMachine(c.Client, info.Result.(types.ManagedObjectReference)))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestEachSimulatorHasACAOfItsOwn(t *testing.T) {
	a := start(t, Options{Templates: []string{}, GuestAddressDelay: -1})
	b := start(t, Options{Templates: []string{}, GuestAddressDelay: -1})
	tests := []struct {
		name   string
		sim    *Simulator
		caPEM  []byte
		wantOK bool
	}{
		{"a simulator's certificate verifies against its CA", a, a.CACert, true},
		{"a simulator's certificate does not verify against another simulator's CA", b, a.CACert, false},
		{"a simulator's certificate does not verify against a fresh CA", a, mustNewCA(t), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(tt.caPEM) {
				t.Fatal("no certificate in the CA's PEM")
			}
			conn, err := tls.Dial("tcp", tt.sim.URL.Host, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
			if err == nil {
				_ = conn.Close()
			}
			if got := err == nil; got != tt.wantOK {
				t.Errorf("handshake error %v, want success %t", err, tt.wantOK)
			}
		})
	}
}

func TestTemplatesHaveTheHardwareOfARealTemplate(t *testing.T) {
	s := start(t, Options{Templates: []string{"ubuntu-24.04", "flatcar"}, GuestAddressDelay: -1})
	ctx := context.Background()
	c := s.OwnClient()
	cluster, err := find.NewFinder(c.Client).ClusterComputeResource(ctx, "/"+Datacenter+"/host/"+Cluster)
	if err != nil {
		t.Fatal(err)
	}
	var cr mo.ClusterComputeResource
	if err := cluster.Properties(ctx, cluster.Reference(), []string{"host"}, &cr); err != nil {
		t.Fatal(err)
	}
	if len(s.TemplateRefs) != 2 {
		t.Fatalf("template refs %v, want two", s.TemplateRefs)
	}
	for name, ref := range s.TemplateRefs {
		var vm mo.VirtualMachine
		if err := c.RetrieveOne(ctx, types.ManagedObjectReference{Type: "VirtualMachine", Value: ref}, []string{"name", "config", "runtime.host", "network"}, &vm); err != nil {
			t.Fatal(err)
		}
		got := templateSummary{Name: vm.Name, Template: vm.Config.Template, CPUs: vm.Config.Hardware.NumCPU, MemoryMiB: vm.Config.Hardware.MemoryMB,
			InCluster: vm.Runtime.Host != nil && slices.Contains(cr.Host, *vm.Runtime.Host)}
		for _, d := range vm.Config.Hardware.Device {
			switch d := d.(type) {
			case *types.ParaVirtualSCSIController:
				got.Controller = "pvscsi"
			case *types.VirtualDisk:
				b := d.Backing.(*types.VirtualDiskFlatVer2BackingInfo)
				got.DiskGiB, got.Thin, got.DiskOn = d.CapacityInKB>>20, *b.ThinProvisioned, b.FileName[:len(Datastore)+2]
			case *types.VirtualVmxnet3:
				got.NIC = "vmxnet3"
			}
		}
		want := templateSummary{Name: name, Template: true, CPUs: TemplateCPUs, MemoryMiB: TemplateMemoryMiB, InCluster: true,
			Controller: "pvscsi", DiskGiB: TemplateDiskGiB, Thin: true, DiskOn: "[" + Datastore + "]", NIC: "vmxnet3"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("template %s (-want +got):\n%s", name, diff)
		}
		if len(vm.Network) != 1 {
			t.Errorf("template %s is on networks %v, want %s alone", name, vm.Network, Network)
		}
	}
}

// templateSummary is what a clone inherits from a template.
type templateSummary struct {
	Name, Controller, DiskOn, NIC string
	Template, InCluster, Thin     bool
	CPUs, MemoryMiB               int32
	DiskGiB                       int64
}

func TestRestartEndsEverySessionButTheSimulatorsOwn(t *testing.T) {
	s := start(t, Options{Templates: []string{}, GuestAddressDelay: -1})
	ctx := context.Background()
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sessions, err := s.Sessions(ctx); err != nil || len(sessions) != 1 {
		t.Fatalf("sessions after a login = %d, %v; want 1", len(sessions), err)
	}
	s.Down()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if sessions, err := s.Sessions(ctx); err != nil || len(sessions) != 0 {
		t.Fatalf("sessions after Restart = %d, %v; want 0", len(sessions), err)
	}
	c.Client.CloseIdleConnections() // Down cut its connections
	if active, err := c.SessionManager.SessionIsActive(ctx); err == nil && active {
		t.Error("the client's session outlived the restart")
	}
}

// start starts a simulator that stops when the test ends.
func start(t *testing.T, o Options) *Simulator {
	t.Helper()
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func mustNewCA(t *testing.T) []byte {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func guestIP(ctx context.Context, vm *object.VirtualMachine) string {
	var props mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"guest.ipAddress"}, &props); err != nil || props.Guest == nil {
		return ""
	}
	return props.Guest.IpAddress
}

func waitForIP(ctx context.Context, vm *object.VirtualMachine) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if ip := guestIP(ctx, vm); ip != "" {
			return ip, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
