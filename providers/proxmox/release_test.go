package proxmox

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/luthermonson/go-proxmox"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

func TestReleaseKeepsTheUsersTagsNotesSeedAndDisks(t *testing.T) {
	sim := proxmoxtest.Start(t)
	api := proxmox.NewClient(sim.URL, proxmox.WithHTTPClient(sim.HTTPClient()), proxmox.WithAPIToken(sim.TokenID, sim.TokenSecret))
	ctx := context.Background()
	s := connect(t, sim, newDriver(sim))
	m := newMachine("7c1e7d0e-1c8a-4a52-9a55-0c3c0b1f0a02")
	m.UserData = []byte("#cloud-config\nhostname: web\n")
	obs := converge(t, s, m)
	record(t, m, obs)
	vm := theVM(t, sim)

	// The VM's owner adds a tag and a note of their own, on PVE, around banlieue's.
	path := fmt.Sprintf("/nodes/%s/qemu/%d/config", vm.Node, vm.VMID)
	desc := "Owner: team web\n" + vm.Config["description"] + "Backed up nightly.\n"
	if err := api.Put(ctx, path, map[string]any{"tags": "prod;" + vm.Config["tags"], "description": desc}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := sim.VM(vm.VMID)

	m.Deleting, m.Spec.DeletionPolicy = true, banlieuev1.DeletionPolicyRetain
	obs, err := s.Observe(ctx, m)
	if err != nil || !obs.Exists {
		t.Fatalf("Observe of the marked VM of a machine deleted under Retain: %+v, %v", obs, err)
	}
	res, err := s.Release(ctx, m, obs)
	if err != nil || res.Task.InFlight() {
		t.Fatalf("Release = %+v, %v; want done at once", res, err)
	}
	after, ok := sim.VM(vm.VMID)
	if !ok {
		t.Fatal("the VM is gone")
	}
	if diff := cmp.Diff(map[string]string{"tags": "prod", "description": "Owner: team web\nBacked up nightly.\n"}, pick(after, "tags", "description")); diff != "" {
		t.Errorf("tags and description after Release (-want +got):\n%s", diff)
	}
	// Nothing else changed: disks, the seed, the snippet, the NICs.
	for k, v := range before {
		if k != "tags" && k != "description" && k != "digest" && after[k] != v {
			t.Errorf("config %s = %q after Release, was %q", k, after[k], v)
		}
	}
	if !strings.Contains(before["cicustom"], "snippets/") {
		t.Errorf("the VM had no user-data snippet to keep: cicustom %q", before["cicustom"])
	}
	if st, _ := theVMStatus(sim, vm.VMID); st != "running" {
		t.Errorf("the VM is %s after Release, want running", st)
	}

	// A provider restarted after the release finds no VM for the machine.
	m.Task = providersdk.Task{}
	for _, cl := range []*session{s, connect(t, sim, newDriver(sim))} {
		if obs, err := cl.Observe(ctx, m); err != nil || obs.Exists || obs.Task.InFlight() {
			t.Errorf("Observe of a released VM = %+v, %v; want no VM", obs, err)
		}
	}
}

// theVMStatus is the VM's run status in the simulator.
func theVMStatus(sim *proxmoxtest.Simulator, vmid int) (string, bool) {
	for _, vm := range sim.VMs() {
		if vm.VMID == vmid {
			return vm.Status, true
		}
	}
	return "", false
}
