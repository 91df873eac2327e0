package proxmoxsim

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// listed is the guest vmid as /cluster/resources lists it.
func listed(t *testing.T, c *proxmox.Client, vmid int) *proxmox.ClusterResource {
	t.Helper()
	cl, err := c.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cl.Resources(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if int(r.VMID) == vmid {
			return r
		}
	}
	t.Fatalf("VM %d is not listed", vmid)
	return nil
}

func TestTheClusterListingLagsAsPvestatdReports(t *testing.T) {
	s := start(t, Options{StatusInterval: time.Hour})
	ctx := context.Background()
	c := client(t, s)
	if r := listed(t, c, FirstTemplateVMID); r.Name != DefaultTemplate || r.Template != 1 || r.Status != "stopped" {
		t.Errorf("the template a cluster starts with: %+v, want reported", r)
	}
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 140, Name: "web-1"})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "tags", Value: "a;b"}); err != nil {
		t.Fatal(err)
	}
	// The VMID, node, lock and tags come from pmxcfs at once; the rest from pvestatd.
	if r := listed(t, c, newid); r.Status != "unknown" || r.Name != "" || r.Tags != "a;b" || r.Node != "pve1" || r.MaxMem != 0 {
		t.Errorf("a new clone before pvestatd reports it: %+v, want status unknown, no name, its tags", r)
	}
	s.ReportStatus()
	if r := listed(t, c, newid); r.Status != "stopped" || r.Name != "web-1" {
		t.Errorf("after the report: %+v, want stopped web-1", r)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "name", Value: "web-2"}); err != nil {
		t.Fatal(err)
	}
	if r := listed(t, c, newid); r.Name != "web-1" {
		t.Errorf("a renamed VM before the next report: %q, want the old name web-1", r.Name)
	}
	if err := vm.Ping(ctx); err != nil || vm.Name != "web-2" {
		t.Errorf("status/current: %q, %v; want the new name at once", vm.Name, err)
	}

	t.Run("a negative interval reports at once", func(t *testing.T) {
		s := start(t, Options{StatusInterval: -1})
		c := client(t, s)
		newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 141, Name: "db"})
		must(t)(task, err)
		if r := listed(t, c, newid); r.Name != "db" || r.Status != "stopped" {
			t.Errorf("listing: %+v, want db stopped", r)
		}
	})
}

func TestTwoClonesOntoOneVMIDBothStartAndTheSecondFailsInItsWorker(t *testing.T) {
	tests := []struct {
		name       string
		cloneDelay time.Duration
		want       string
	}{
		{name: "while the first clone runs, the second cannot lock the VMID", cloneDelay: 2 * time.Second,
			want: "can't lock file '/var/lock/qemu-server/lock-150.conf' - got timeout"},
		{name: "after the first clone, the second finds its config", cloneDelay: 0,
			want: "unable to create VM 150: config file already exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{ForkDelay: 200 * time.Millisecond, TaskDelays: map[string]time.Duration{"qmclone": tt.cloneDelay}})
			ctx := context.Background()
			c := client(t, s)
			tpl := template(t, c)
			_, first, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 150, Name: "first"})
			if err != nil {
				t.Fatal(err)
			}
			_, second, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 150, Name: "second"})
			if err != nil {
				t.Fatalf("the second request for VMID 150 was refused (%v); PVE's early check passes it", err)
			}
			err = wait(t)(second, nil)
			if !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("second clone: %v, want a failed task: %s", err, tt.want)
			}
			must(t)(first, nil)
			if conf, _ := s.VM(150); conf["name"] != "first" {
				t.Errorf("VM 150 is %q, want the first clone", conf["name"])
			}
			// A request for a VMID whose config exists is refused before any worker.
			if _, _, err := tpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 150}); err == nil ||
				!strings.Contains(err.Error(), "unable to create VM 150: config file already exists") {
				t.Errorf("clone onto the taken VMID: %v, want refused", err)
			}
		})
	}
}

func TestAConfigChangeWaitsForTheConfigLockOfAnotherTask(t *testing.T) {
	tests := []struct {
		name        string
		lockTimeout time.Duration
		wantErr     string
	}{
		{name: "a lock held longer than the timeout fails the change", lockTimeout: 200 * time.Millisecond,
			wantErr: "can't lock file '/var/lock/qemu-server/lock-160.conf' - got timeout"},
		{name: "a lock released within the timeout lets the change through", lockTimeout: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{LockTimeout: tt.lockTimeout, TaskDelays: map[string]time.Duration{"resize": time.Second}})
			ctx := context.Background()
			c := client(t, s)
			newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 160, Name: "db"})
			must(t)(task, err)
			vm := c.NodeRef("pve1").VirtualMachineRef(newid)
			resize, err := vm.ResizeDisk(ctx, "scsi0", "+1G")
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			err = vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4})
			waited := time.Since(began)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("config change: %v, want it made once the resize ended", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("config change: %v, want %s", err, tt.wantErr)
			case tt.wantErr != "" && waited < tt.lockTimeout:
				t.Errorf("config change failed after %v, before the lock timeout %v", waited, tt.lockTimeout)
			}
			must(t)(resize, nil)
		})
	}
}

func TestAClusterWithoutQuorumRefusesWrites(t *testing.T) {
	s := start(t, Options{Nodes: []string{"pve1", "pve2", "pve3"}})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 170, Name: "db"})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	for _, n := range []string{"pve2", "pve3"} {
		if err := s.SetNodeOnline(n, false); err != nil {
			t.Fatal(err)
		}
	}
	quorate := func() int {
		cl, err := c.Cluster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return cl.Quorate
	}
	if q := quorate(); q != 0 {
		t.Errorf("two of three nodes offline: quorate = %d, want 0", q)
	}
	_, _, err = template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 171})
	if apiStatus(err) != http.StatusInternalServerError || !strings.Contains(err.Error(), "cluster not ready - no quorum?") {
		t.Errorf("clone without quorum: %v, want 500 cluster not ready - no quorum?", err)
	}
	if _, err := vm.Start(ctx); err == nil || !strings.Contains(err.Error(), "cluster not ready - no quorum?") {
		t.Errorf("start without quorum: %v, want refused", err)
	}
	err = vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4})
	if err == nil || !strings.Contains(err.Error(), "unable to open file '/etc/pve/nodes/pve1/qemu-server/170.conf.tmp.") {
		t.Errorf("config change without quorum: %v, want the read-only /etc/pve", err)
	}
	if err := s.SetNodeOnline("pve3", true); err != nil {
		t.Fatal(err)
	}
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4}); err != nil {
		t.Errorf("config change with quorum back: %v", err)
	}
	s.SetQuorate(false)
	if q := quorate(); q != 0 {
		t.Errorf("quorum taken away: quorate = %d, want 0", q)
	}
	s.SetQuorate(true)
	must(t)(vm.Start(ctx))
}
