package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25/mo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/sim/libvirtd"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// backendVM is a VM on a backend, with the machine UID it carries ("" when none).
type backendVM struct {
	// ID names it on the backend: a vSphere managed object, a Proxmox VMID, a libvirt
	// domain name.
	ID  string
	UID string
}

// vsphereVMs lists the simulated vCenter's VMs but its templates, with the machine UID
// the vSphere provider writes in extraConfig (and as the instance UUID).
func vsphereVMs(ctx context.Context, sim *vspheresim.Simulator) ([]backendVM, error) {
	c := sim.OwnClient().Client
	v, err := view.NewManager(c).CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, fmt.Errorf("failed to list vSphere VMs: %w", err)
	}
	defer func() { _ = v.Destroy(ctx) }()
	var vms []mo.VirtualMachine
	if err := v.Retrieve(ctx, []string{"VirtualMachine"}, []string{"name", "config"}, &vms); err != nil {
		return nil, fmt.Errorf("failed to list vSphere VMs: %w", err)
	}
	var out []backendVM
	for _, vm := range vms {
		if vm.Config != nil && vm.Config.Template {
			continue
		}
		bvm := backendVM{ID: vm.Reference().Value + " (" + vm.Name + ")"}
		if vm.Config != nil {
			for _, o := range vm.Config.ExtraConfig {
				if ov := o.GetOptionValue(); ov.Key == vsphere.ExtraConfigMachineUID {
					bvm.UID, _ = ov.Value.(string)
				}
			}
		}
		out = append(out, bvm)
	}
	return out, nil
}

// proxmoxVMs lists the simulated cluster's VMs but its templates, with the machine UID
// the Proxmox provider writes in their description.
func proxmoxVMs(_ context.Context, sim *proxmoxsim.Simulator) ([]backendVM, error) {
	var out []backendVM
	for _, vm := range sim.VMs() {
		if vm.Template {
			continue
		}
		bvm := backendVM{ID: strconv.Itoa(vm.VMID) + " (" + vm.Name + ")"}
		for line := range strings.SplitSeq(vm.Config["description"], "\n") {
			if uid, ok := strings.CutPrefix(strings.TrimSpace(line), proxmox.DescriptionUIDKey); ok {
				bvm.UID = strings.TrimSpace(uid)
			}
		}
		out = append(out, bvm)
	}
	return out, nil
}

// proxmoxSeeds lists the NoCloud seed ISOs the Proxmox provider uploads,
// iso/banlieue-<uid>-<hash>.iso, on every node's view of the storages, by the machine
// UID in their name: PVE keeps them when their VM is destroyed, so the provider
// removes them itself, and one whose machine is gone is left behind.
func proxmoxSeeds(_ context.Context, sim *proxmoxsim.Simulator) (map[string][]string, error) {
	out := map[string][]string{}
	for _, v := range sim.Volumes("iso") {
		_, name, _ := strings.Cut(v.VolID, ":")
		rest, ok := strings.CutPrefix(name, "iso/"+proxmox.TagPrefix)
		if !ok || !strings.HasSuffix(rest, ".iso") || len(rest) < 37 || rest[36] != '-' {
			continue
		}
		if _, err := uuid.Parse(rest[:36]); err != nil {
			continue
		}
		out[rest[:36]] = append(out[rest[:36]], strings.TrimPrefix(v.Node+"/", "/")+v.VolID)
	}
	return out, nil
}

// libvirtVMs lists the daemon's domains, whose UUID is the machine's UID.
func libvirtVMs(_ context.Context, d *libvirtd.Daemon) ([]backendVM, error) {
	l, err := d.Connect("qemu:///system")
	if err != nil {
		return nil, fmt.Errorf("failed to connect to libvirtd: %w", err)
	}
	defer func() { _ = l.Disconnect() }()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to list domains: %w", err)
	}
	out := make([]backendVM, 0, len(doms))
	for _, dom := range doms {
		out = append(out, backendVM{ID: dom.Name, UID: uuid.UUID(dom.UUID).String()})
	}
	return out, nil
}

// inventoryCounts are what one inventory check found, over every backend.
type inventoryCounts struct {
	vms, duplicates, orphans, missing int
}

// backendInventory is one backend's VMs and the machine kind that stands for them.
type backendInventory struct {
	name string
	kind string
	list func(context.Context) ([]backendVM, error)
	// files lists what the backend keeps for a machine besides its VM and removes
	// with it (Proxmox VE's seed ISOs), by machine UID; nil when there is none.
	files func(context.Context) (map[string][]string, error)
}

// inventories are the running backends.
func (r *rig) inventories() []backendInventory {
	b := r.backends
	invs := []backendInventory{
		{"vSphere", "VSphereMachine", func(ctx context.Context) ([]backendVM, error) { return vsphereVMs(ctx, b.VSphere) }, nil},
		{"Proxmox VE", "ProxmoxMachine", func(ctx context.Context) ([]backendVM, error) { return proxmoxVMs(ctx, b.Proxmox) },
			func(ctx context.Context) (map[string][]string, error) { return proxmoxSeeds(ctx, b.Proxmox) }},
	}
	if b.Libvirt != nil {
		invs = append(invs, backendInventory{"libvirt", "LibvirtMachine", func(ctx context.Context) ([]backendVM, error) { return libvirtVMs(ctx, b.Libvirt) }, nil})
	}
	return invs
}

// checkInventory compares every backend with the machines that stand for its VMs and
// fails the test on a duplicate (two backend VMs with one machine's UID), an orphan (a
// backend VM, or a file kept for a machine such as a seed ISO, that no machine stands
// for) or a machine with no backend VM, but for a machine that lost an adoption. The
// machines are the fleet's and the adoptions' (r.machineNamespaces). With empty it also
// fails on any machine or backend VM at all, but for the VMs deletions under
// deletionPolicy Retain let go (r.retained).
func (r *rig) checkInventory(t *testing.T, empty bool) inventoryCounts {
	t.Helper()
	var (
		counts   inventoryCounts
		problems []string
	)
	for _, inv := range r.inventories() {
		namespaces := r.machineNamespaces()
		machines := make([]metav1.PartialObjectMetadata, 0, len(namespaces))
		for _, ns := range namespaces {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(infrav1.GroupVersion.WithKind(inv.kind + "List"))
			if err := r.c.List(r.ctx, list, client.InNamespace(ns)); err != nil {
				t.Fatalf("failed to list %s: %v", inv.kind, err)
			}
			machines = append(machines, list.Items...)
		}
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		vms, err := inv.list(ctx)
		var files map[string][]string
		if err == nil && inv.files != nil {
			files, err = inv.files(ctx)
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		counts.vms += len(vms)
		byUID := map[string][]string{}
		for _, vm := range vms {
			if !r.retained[vm.ID] {
				byUID[vm.UID] = append(byUID[vm.UID], vm.ID)
			}
		}
		losers := r.adoptionLosers()
		for _, m := range machines {
			ids := byUID[string(m.UID)]
			delete(byUID, string(m.UID))
			if kept := files[string(m.UID)]; len(kept) > 1 {
				// One machine, one seed: an older one is left behind.
				counts.orphans += len(kept) - 1
				problems = append(problems, fmt.Sprintf("%s: %s %s (%s) keeps %d files, not 1: %s", inv.name, inv.kind, m.Name, m.UID, len(kept), strings.Join(kept, ", ")))
			}
			delete(files, string(m.UID))
			switch {
			case empty:
				problems = append(problems, fmt.Sprintf("%s: %s %s is left", inv.name, inv.kind, m.Name))
			case len(ids) == 0 && losers[string(m.UID)]:
				// It lost an adoption: the VM it names is another machine's.
			case len(ids) == 0:
				counts.missing++
				problems = append(problems, fmt.Sprintf("%s: %s %s (%s) has no backend VM", inv.name, inv.kind, m.Name, m.UID))
			case len(ids) > 1:
				counts.duplicates += len(ids) - 1
				problems = append(problems, fmt.Sprintf("%s: %s %s (%s) has %d backend VMs: %s", inv.name, inv.kind, m.Name, m.UID, len(ids), strings.Join(ids, ", ")))
			}
		}
		for uid, ids := range byUID {
			counts.orphans += len(ids)
			problems = append(problems, fmt.Sprintf("%s: orphaned VMs with machine UID %q: %s", inv.name, uid, strings.Join(ids, ", ")))
		}
		for uid, names := range files {
			counts.orphans += len(names)
			problems = append(problems, fmt.Sprintf("%s: leftover files of machine UID %q: %s", inv.name, uid, strings.Join(names, ", ")))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		t.Fatalf("the backends do not match the machines (%d duplicates, %d orphans, %d machines without a VM):\n%s",
			counts.duplicates, counts.orphans, counts.missing, summary(problems, 40))
	}
	return counts
}
