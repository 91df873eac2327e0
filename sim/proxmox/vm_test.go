package proxmoxsim

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	proxmox "github.com/luthermonson/go-proxmox"
)

// template is the default template, FirstTemplateVMID on pve1.
func template(t *testing.T, c *proxmox.Client) *proxmox.VirtualMachine {
	t.Helper()
	vm, err := c.NodeRef("pve1").VirtualMachine(context.Background(), FirstTemplateVMID)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func TestClonesGetTheirDisksAsPVENamesThem(t *testing.T) {
	tests := []struct {
		name     string
		opts     proxmox.VirtualMachineCloneOptions
		wantSCSI string
	}{
		{name: "a linked clone of a template refers to the base volume", opts: proxmox.VirtualMachineCloneOptions{NewID: 101, Name: "web-1"},
			wantSCSI: "local-lvm:base-9000-disk-0/vm-101-disk-0,iothread=1,size=10G"},
		{name: "a full clone copies the disk", opts: proxmox.VirtualMachineCloneOptions{NewID: 102, Name: "web-2", Full: true},
			wantSCSI: "local-lvm:vm-102-disk-0,iothread=1,size=10G"},
	}
	s := start(t, Options{})
	c := client(t, s)
	tpl := template(t, c)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			newid, task, err := tpl.Clone(context.Background(), &opts)
			must(t)(task, err)
			conf, ok := s.VM(newid)
			if !ok {
				t.Fatalf("no VM %d after the clone", newid)
			}
			got := map[string]string{"name": conf["name"], "scsi0": conf["scsi0"], "ide2": conf["ide2"], "template": conf["template"], "lock": conf["lock"]}
			want := map[string]string{"name": tt.opts.Name, "scsi0": tt.wantSCSI, "ide2": "local-lvm:vm-" + strconv.Itoa(newid) + "-cloudinit,media=cdrom", "template": "", "lock": ""}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("clone config (-want +got):\n%s", diff)
			}
			src, _ := s.VM(9000)
			if netMAC(conf["net0"]) == netMAC(src["net0"]) || netBridge(conf["net0"]) != "vmbr0" {
				t.Errorf("net0 = %q, want a new MAC on vmbr0 (template's %q)", conf["net0"], src["net0"])
			}
		})
	}
}

func TestVMIDsInUseAreRefused(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	tpl := template(t, c)
	_, task, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 100})
	must(t)(task, err)
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next, err := cl.NextID(ctx); err != nil || next != 101 {
		t.Errorf("nextid = %d, %v; want 101, past the VMID in use", next, err)
	}
	if free, err := cl.CheckID(ctx, 100); err != nil || free {
		t.Errorf("CheckID(100) = %v, %v; want taken", free, err)
	}
	_, _, err = tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 100})
	if err == nil || !strings.Contains(err.Error(), "unable to create VM 100: config file already exists") {
		t.Errorf("clone onto VMID 100: %v, want PVE's conflict error", err)
	}
	_, err = c.NodeRef("pve1").NewVirtualMachine(ctx, 9000, proxmox.VirtualMachineOption{Name: "memory", Value: 1024})
	if err == nil || !strings.Contains(err.Error(), "unable to create VM 9000 - VM 9000 already exists on node 'pve1'") {
		t.Errorf("create with VMID 9000: %v, want PVE's conflict error", err)
	}
}

func TestAConfigChangeDuringASlowCloneFailsOnTheLock(t *testing.T) {
	s := start(t, Options{TaskDelays: map[string]time.Duration{"qmclone": 500 * time.Millisecond}, LockTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	c := client(t, s)
	tpl := template(t, c)
	newid, cloneTask, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 120, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	clone := c.NodeRef("pve1").VirtualMachineRef(newid)
	if err := clone.Ping(ctx); err != nil || clone.Lock != "clone" {
		t.Fatalf("clone in progress: lock %q, %v; want clone", clone.Lock, err)
	}
	err = clone.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "memory", Value: 4096})
	if err == nil || !strings.Contains(err.Error(), "VM is locked (clone)") {
		t.Errorf("sync config change on the clone: %v, want VM is locked (clone)", err)
	}
	// PVE checks the lock before it forks the worker.
	if _, err = clone.Config(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4}); err == nil || !strings.Contains(err.Error(), "VM is locked (clone)") {
		t.Errorf("async config change on the clone: %v, want VM is locked (clone)", err)
	}
	err = tpl.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "description", Value: "x"})
	if err == nil || !strings.Contains(err.Error(), "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout") {
		t.Errorf("config change on the template being read: %v, want the flock timeout", err)
	}
	must(t)(cloneTask, nil)
	if err := clone.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "memory", Value: 4096}); err != nil {
		t.Errorf("after the clone: %v", err)
	}
}

func TestConfigUpdatesAndResizeChangeTheVM(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 130, Name: "db"})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	must(t)(vm.Config(ctx,
		proxmox.VirtualMachineOption{Name: "cores", Value: 4},
		proxmox.VirtualMachineOption{Name: "memory", Value: 8192},
		proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:20"},
		proxmox.VirtualMachineOption{Name: "net1", Value: "virtio,bridge=vmbr0"},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=192.168.10.5/24,gw=192.168.10.1"},
		proxmox.VirtualMachineOption{Name: "tags", Value: "banlieue;web"},
	))
	must(t)(vm.ResizeDisk(ctx, "scsi0", "+5G"))
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := vm.VirtualMachineConfig
	got := []any{*cfg.Cores, int(cfg.Memory), cfg.SCSIs["scsi0"], cfg.SCSIs["scsi1"], cfg.Tags, vm.CPUs, vm.MaxDisk}
	want := []any{4, 8192, "local-lvm:base-9000-disk-0/vm-130-disk-0,iothread=1,size=15G", "local-lvm:vm-130-disk-1,size=20G", "banlieue;web", 4, uint64(15 << 30)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config after update and resize (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(cfg.Nets["net1"], "virtio=BC:24:11:") {
		t.Errorf("net1 = %q, want a generated MAC", cfg.Nets["net1"])
	}
	_, err = vm.ResizeDisk(ctx, "scsi0", "1G")
	if err == nil || !strings.Contains(err.Error(), "shrinking disks is not supported") {
		t.Errorf("shrink: %v", err)
	}
	err = vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "frobnicate", Value: 1})
	if !proxmox.IsBadRequest(err) || !strings.Contains(err.Error(), "property is not defined in schema") {
		t.Errorf("unknown key: %v, want a 400 from the schema", err)
	}
}

func TestPowerActionsChangeTheStatus(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 140})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	steps := []struct {
		name          string
		do            func() (*proxmox.Task, error)
		status, qmp   string
		running, stop bool
	}{
		{name: "start", do: func() (*proxmox.Task, error) { return vm.Start(ctx) }, status: "running", qmp: "running"},
		{name: "suspend", do: func() (*proxmox.Task, error) { return vm.Pause(ctx) }, status: "running", qmp: "paused"},
		{name: "resume", do: func() (*proxmox.Task, error) { return vm.Resume(ctx) }, status: "running", qmp: "running"},
		{name: "reboot", do: func() (*proxmox.Task, error) { return vm.Reboot(ctx) }, status: "running", qmp: "running"},
		{name: "shutdown", do: func() (*proxmox.Task, error) { return vm.Shutdown(ctx) }, status: "stopped", qmp: "stopped"},
		{name: "start again", do: func() (*proxmox.Task, error) { return vm.Start(ctx) }, status: "running", qmp: "running"},
		{name: "stop", do: func() (*proxmox.Task, error) { return vm.Stop(ctx) }, status: "stopped", qmp: "stopped"},
	}
	for _, st := range steps {
		must(t)(st.do())
		if err := vm.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{st.status, st.qmp}, []string{vm.Status, vm.QMPStatus}); diff != "" {
			t.Errorf("after %s, status and qmpstatus (-want +got):\n%s", st.name, diff)
		}
	}
	_, err = vm.Pause(ctx)
	if err == nil || !strings.Contains(err.Error(), "VM 140 not running") {
		t.Errorf("suspend a stopped VM: %v", err)
	}
	err = wait(t)(c.NodeRef("pve1").VirtualMachineRef(9000).Start(ctx))
	if !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), "you can't start a vm if it's a template") {
		t.Errorf("start a template: %v", err)
	}
}

func TestTheGuestAgentReportsAddressesAfterItsDelay(t *testing.T) {
	s := start(t, Options{GuestAgentDelay: 300 * time.Millisecond})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 150})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	if _, err := vm.AgentGetNetworkIFaces(ctx); err == nil || !strings.Contains(err.Error(), "VM 150 is not running") {
		t.Errorf("agent of a stopped VM: %v", err)
	}
	must(t)(vm.Start(ctx))
	_, err = vm.AgentGetNetworkIFaces(ctx)
	if ae, ok := proxmox.AsAPIError(err); !ok || ae.StatusCode != 500 || !strings.Contains(ae.Message, "QEMU guest agent is not running") {
		t.Fatalf("agent right after start: %v, want 500 QEMU guest agent is not running", err)
	}
	if err := vm.WaitForAgent(ctx, 5); err != nil {
		t.Fatal(err)
	}
	ifaces, err := vm.AgentGetNetworkIFaces(ctx)
	if err != nil || len(ifaces) != 1 || len(ifaces[0].IPAddresses) == 0 {
		t.Fatalf("interfaces: %+v, %v", ifaces, err)
	}
	conf, _ := s.VM(newid)
	got := []string{ifaces[0].HardwareAddress, ifaces[0].IPAddresses[0].IPAddressType, ifaces[0].IPAddresses[0].IPAddress}
	want := []string{strings.ToLower(netMAC(conf["net0"])), "ipv4", "10.10.0.150"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("eth0 (-want +got):\n%s", diff)
	}
}

func TestDeletingAVMRemovesItsDisks(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 160, Full: true})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	must(t)(vm.Config(ctx, proxmox.VirtualMachineOption{Name: "scsi1", Value: "local-lvm:1"}))
	_, task, err = template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 161})
	must(t)(task, err)
	err = wait(t)(template(t, c).Delete(ctx, nil))
	if !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), "base volume 'local-lvm:base-9000-disk-0' is still in use by linked cloned") {
		t.Fatalf("deleting a template with a linked clone: %v", err)
	}
	must(t)(vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true}))
	if _, ok := s.VM(newid); ok {
		t.Error("the VM is still there")
	}
	content, err := c.NodeRef("pve1").StorageRef("local-lvm").GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vols := make([]string, 0, len(content))
	for _, v := range content {
		vols = append(vols, v.Volid)
	}
	want := []string{"local-lvm:base-9000-disk-0", "local-lvm:base-9000-disk-0/vm-161-disk-0", "local-lvm:vm-161-cloudinit", "local-lvm:vm-9000-cloudinit"}
	if diff := cmp.Diff(want, vols); diff != "" {
		t.Errorf("volumes left (-want +got):\n%s", diff)
	}
}

// A VMID's disks are named from 0 again once the VM that had it is gone, as PVE picks
// the first name no volume on the storage has; a linked clone's disk counts by its own
// name, after its base's.
func TestADeletedVMsDiskNamesAreFreeAgain(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	tpl := template(t, c)
	for _, full := range []proxmox.IntOrBool{false, true, false} {
		_, task, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 101, Full: full})
		must(t)(task, err)
		conf, _ := s.VM(101)
		if want := "vm-101-disk-0"; !strings.Contains(conf["scsi0"], want) || strings.Contains(conf["scsi0"], "disk-1") {
			t.Errorf("clone (full %v) onto VMID 101: scsi0 = %q, want %s", full, conf["scsi0"], want)
		}
		vm, err := c.NodeRef("pve1").VirtualMachine(ctx, 101)
		if err != nil {
			t.Fatal(err)
		}
		must(t)(vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true}))
	}
}
