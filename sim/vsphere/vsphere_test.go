package vspheresim

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

func TestTheSimulatorServesTemplatesAndGuestsThatReportAnAddress(t *testing.T) {
	s, err := Start(Options{GuestAddressDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
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
	tpl, err := finder.VirtualMachine(ctx, "ubuntu-22.04")
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
