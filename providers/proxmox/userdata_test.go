package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// uploadRequest is the simulator's count of uploads.
const uploadRequest = "POST /nodes/{node}/storage/{storage}/upload"

// seedMachine is a machine with user data (spec.userData and the payload the SDK reads
// before Create) and, when static, an interface with static IPAM and one with DHCP.
func seedMachine(uid, userData string, static bool) *providersdk.Machine {
	m := newMachine(uid)
	m.Spec.UserData = &banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: "ud"}}
	m.UserData = []byte(userData)
	if static {
		m.Spec.Interfaces = []infrav1.MachineInterface{
			{Name: "eth0", NetworkClass: "prod", Target: map[string]string{"bridge": proxmoxtest.Bridge},
				IPAM: &banlieuev1.IPAM{Source: banlieuev1.IPAMSourceStatic, Static: banlieuev1.StaticIPAM{
					Addresses: []string{"10.1.2.3/24"}, Gateway: "10.1.2.1", Nameservers: []string{"10.1.0.53"}}}},
			{Name: "eth1", NetworkClass: "prod", Target: map[string]string{"bridge": proxmoxtest.Bridge}},
		}
	}
	return m
}

// isos lists the ISO images of a storage on Node1, through the API as any client sees them.
func isos(t *testing.T, s *session, storage string) []string {
	t.Helper()
	vols, err := s.api.Volumes(context.Background(), proxmoxtest.Node1, storage, pve.VolumeFilter{Content: "iso"})
	if err != nil {
		t.Fatal(err)
	}
	return vols
}

// eventually waits until cond holds, for the simulator's tasks that nobody polls.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
	}
}

// createStep is one reconcile that creates: Observe, then Create, and its task settled.
func createStep(t *testing.T, s *session, m *providersdk.Machine) providersdk.Task {
	t.Helper()
	task, err := observeCreate(t, s, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := settle(t, s, m, task); err != nil {
		t.Fatal(err)
	}
	return task
}

// deleteMachine runs the reconciler's deletion as the SDK does, Delete called once
// more when Observe finds no VM, until Delete has nothing left to do.
func deleteMachine(t *testing.T, s *session, m *providersdk.Machine) {
	t.Helper()
	for range 10 {
		o, err := settle(t, s, m, m.Task)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Delete(context.Background(), m, o)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Task.InFlight() && !o.Exists {
			return
		}
		setTask(m, res.Task)
	}
	t.Fatal("Delete did not finish in 10 steps")
}

func TestUserDataIsASeedISOAttachedBeforeTheFirstStart(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, NewDriver()) // no SnippetWriter: the API alone
	const uid = "3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e01"
	userData := "#cloud-config\npackages: [nginx]\n"
	m := seedMachine(uid, userData, true)

	// The first Create uploads the seed; the clone waits for the upload's task.
	upload := createStep(t, s, m)
	if !strings.Contains(upload.Ref, ":imgcopy:") || upload.Operation != providersdk.OperationCreate {
		t.Fatalf("first Create's task = %+v, want the seed's imgcopy", upload)
	}
	vols := isos(t, s, proxmoxtest.SnippetsStorage)
	if len(vols) != 1 || !isSeedOf(vols[0], m.UID) {
		t.Fatalf("ISOs on %s = %v, want the machine's seed", proxmoxtest.SnippetsStorage, vols)
	}
	volid := vols[0]
	if want := proxmoxtest.SnippetsStorage + ":iso/banlieue-" + uid + "-"; !strings.HasPrefix(volid, want) || len(volid) != len(want)+len("01234567.iso") {
		t.Errorf("seed %s, want %s<8 hex digits>.iso", volid, want)
	}
	clone := createStep(t, s, m)
	if clone.Operation != providersdk.OperationClone {
		t.Fatalf("second Create's task = %+v, want the clone", clone)
	}
	m.UserData = nil // the SDK reads user data only before Create
	converge(t, s, m)

	t.Run("the seed was uploaded once, and is the CD-ROM in place of the template's cloud-init drive", func(t *testing.T) {
		if n := sim.Requests()[uploadRequest]; n != 1 {
			t.Errorf("%d uploads, want 1", n)
		}
		vm := theVM(t, sim)
		if got, want := vm.Config["ide2"], volid+",media=cdrom"; got != want {
			t.Errorf("ide2 = %q, want %q", got, want)
		}
		for k, v := range vm.Config {
			if strings.Contains(v, "cloudinit") {
				t.Errorf("%s = %q: a second NoCloud source besides the seed", k, v)
			}
		}
		if vm.Status != "running" {
			t.Errorf("VM is %s, want running", vm.Status)
		}
	})

	t.Run("the seed carries the user data, the machine's identity and its static network by the NICs' MACs", func(t *testing.T) {
		vm := theVM(t, sim)
		data, ok := sim.Volume(proxmoxtest.Node1, volid)
		if !ok {
			t.Fatalf("no %s on %s", volid, proxmoxtest.Node1)
		}
		files, label, err := nocloud.ReadISO(data)
		if err != nil {
			t.Fatal(err)
		}
		if label != nocloud.VolumeLabel {
			t.Errorf("label %q, want %q", label, nocloud.VolumeLabel)
		}
		if diff := cmp.Diff(map[string]string{
			"user-data": userData,
			"meta-data": "instance-id: \"" + uid + "\"\nlocal-hostname: \"" + m.Name + "\"\n",
		}, map[string]string{"user-data": string(files["user-data"]), "meta-data": string(files["meta-data"])}); diff != "" {
			t.Errorf("seed files (-want +got):\n%s", diff)
		}
		var nc struct {
			Version   int `json:"version"`
			Ethernets map[string]struct {
				Match     struct{ MACAddress string } `json:"match"`
				DHCP4     bool                        `json:"dhcp4"`
				Addresses []string                    `json:"addresses"`
			} `json:"ethernets"`
		}
		if err := json.Unmarshal(files["network-config"], &nc); err != nil {
			t.Fatalf("network-config: %v\n%s", err, files["network-config"])
		}
		mac := func(key string) string {
			model, mac, _ := strings.Cut(pve.ParseProperty(vm.Config[key]).First, "=")
			if model != "virtio" {
				t.Errorf("%s = %q, want the template's virtio model", key, vm.Config[key])
			}
			return strings.ToLower(mac)
		}
		if nc.Version != 2 || len(nc.Ethernets) != 2 {
			t.Fatalf("network-config = %s, want version 2 with two ethernets", files["network-config"])
		}
		if e := nc.Ethernets["net0"]; e.Match.MACAddress != mac("net0") || !slices.Equal(e.Addresses, []string{"10.1.2.3/24"}) {
			t.Errorf("net0 in network-config = %+v, want MAC %s and 10.1.2.3/24", e, mac("net0"))
		}
		if e := nc.Ethernets["net1"]; e.Match.MACAddress != mac("net1") || !e.DHCP4 {
			t.Errorf("net1 in network-config = %+v, want MAC %s by DHCP", e, mac("net1"))
		}
	})

	t.Run("Delete destroys the VM, then removes its seed", func(t *testing.T) {
		deleteMachine(t, s, m)
		if vms := len(sim.VMs()); vms != 1 {
			t.Errorf("%d VMs, want the template alone", vms)
		}
		if vols := isos(t, s, proxmoxtest.SnippetsStorage); len(vols) != 0 {
			t.Errorf("ISOs left: %v", vols)
		}
	})
}

func TestSeedWithoutStaticIPAMHasNoNetworkConfig(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, NewDriver())
	m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e02", "#cloud-config\n", false)
	createStep(t, s, m)
	vols := isos(t, s, proxmoxtest.SnippetsStorage)
	if len(vols) != 1 {
		t.Fatalf("ISOs = %v, want the seed", vols)
	}
	data, _ := sim.Volume(proxmoxtest.Node1, vols[0])
	files, _, err := nocloud.ReadISO(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["network-config"]; ok {
		t.Errorf("network-config %q, want none: the guest takes DHCP on its first NIC", files["network-config"])
	}
}

// A provider that dies at any point between the seed's upload and the clone, or
// before its attachment, carries on from what the storage and the VM show: one
// upload of an unchanged seed, one file, one VM.
func TestSeedSurvivesACrashedProvider(t *testing.T) {
	t.Run("killed after the upload ended: the seed is found in the listing, not uploaded again", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e03", "#cloud-config\n", true)
		createStep(t, connect(t, sim, NewDriver()), m)
		m.Task = providersdk.Task{}
		s := connect(t, sim, NewDriver())
		createStep(t, s, m)
		m.UserData = nil
		converge(t, s, m)
		if n := sim.Requests()[uploadRequest]; n != 1 {
			t.Errorf("%d uploads, want 1", n)
		}
		theVM(t, sim)
	})
	t.Run("killed while the upload's task ran: the same file again, never two", func(t *testing.T) {
		sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
			o.TaskDelays = map[string]time.Duration{"imgcopy": 300 * time.Millisecond}
		})
		m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e04", "#cloud-config\n", true)
		if _, err := observeCreate(t, connect(t, sim, NewDriver()), m); err != nil {
			t.Fatal(err)
		}
		s := connect(t, sim, NewDriver()) // the task's UPID died with the first provider
		for range 2 {
			createStep(t, s, m)
		}
		m.UserData = nil
		converge(t, s, m)
		if vols := isos(t, s, proxmoxtest.SnippetsStorage); len(vols) != 1 {
			t.Errorf("ISOs = %v, want one seed", vols)
		}
		theVM(t, sim)
	})
	t.Run("killed after the clone: Update attaches the seed the description names", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e05", "#cloud-config\n", false)
		first := connect(t, sim, NewDriver())
		createStep(t, first, m)
		createStep(t, first, m) // the clone, which names the seed in its description
		m.UserData = nil
		converge(t, connect(t, sim, NewDriver()), m)
		vm := theVM(t, sim)
		if want := descriptionValue(vm.Config["description"], descriptionUserData) + ",media=cdrom"; vm.Config["ide2"] != want {
			t.Errorf("ide2 = %q, want %q", vm.Config["ide2"], want)
		}
	})
	t.Run("deleted between the upload and the clone: the seed goes with the machine", func(t *testing.T) {
		sim := proxmoxtest.Start(t)
		s := connect(t, sim, NewDriver())
		m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e06", "#cloud-config\n", false)
		createStep(t, s, m)
		m.UserData = nil
		deleteMachine(t, s, m)
		if vols := isos(t, s, proxmoxtest.SnippetsStorage); len(vols) != 0 {
			t.Errorf("ISOs left: %v", vols)
		}
	})
}

// User data changed before the clone (the Secret edited while the first seed was
// uploaded) is a new seed; the machine's old one is removed.
func TestChangedUserDataIsANewSeedAndTheOldOneIsRemoved(t *testing.T) {
	sim := proxmoxtest.Start(t)
	s := connect(t, sim, NewDriver())
	m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e07", "#cloud-config\npackages: [nginx]\n", false)
	createStep(t, s, m)
	old := isos(t, s, proxmoxtest.SnippetsStorage)
	m.UserData = []byte("#cloud-config\npackages: [apache2]\n")
	createStep(t, s, m) // the new seed's upload
	eventually(t, "the old seed is removed", func() bool {
		vols := isos(t, s, proxmoxtest.SnippetsStorage)
		return len(vols) == 1 && !slices.Equal(vols, old)
	})
	createStep(t, s, m) // the clone
	m.UserData = nil
	converge(t, s, m)
	vols := isos(t, s, proxmoxtest.SnippetsStorage)
	data, _ := sim.Volume(proxmoxtest.Node1, vols[0])
	files, _, err := nocloud.ReadISO(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(files["user-data"]); got != "#cloud-config\npackages: [apache2]\n" {
		t.Errorf("user-data = %q, want the changed one", got)
	}
	if got := theVM(t, sim).Config["ide2"]; got != vols[0]+",media=cdrom" {
		t.Errorf("ide2 = %q, want the new seed %s", got, vols[0])
	}
	if n := sim.Requests()[uploadRequest]; n != 2 {
		t.Errorf("%d uploads, want 2", n)
	}
}

func TestSeedStorage(t *testing.T) {
	local := proxmoxsim.Storage{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "import"}}
	disks := proxmoxsim.Storage{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}}
	shared := proxmoxsim.Storage{Name: "cephfs", Type: "cephfs", Content: []string{"iso", "backup"}, Shared: true}
	isoOnly := proxmoxsim.Storage{Name: "isos", Type: "nfs", Content: []string{"iso"}}
	tests := []struct {
		name     string
		storages []proxmoxsim.Storage
		param    string
		want     string
		err      func(error) string
	}{
		{name: "the node's first storage for ISO images", storages: []proxmoxsim.Storage{disks, local}, want: "local"},
		{name: "a shared storage before the node's own", storages: []proxmoxsim.Storage{disks, local, shared}, want: "cephfs"},
		{name: "the Provider's isoStorage parameter", storages: []proxmoxsim.Storage{disks, local, isoOnly}, param: "isos", want: "isos"},
		{
			name:     "no storage for ISO images on the node is a permanent placement error saying what to configure",
			storages: []proxmoxsim.Storage{disks, {Name: "local", Type: "dir", Content: []string{"vztmpl", "snippets"}}},
			err: wantErr(func(err error) bool {
				var perr *providersdk.PermanentError
				return errors.As(err, &perr) && perr.Reason == infrav1.MachinePlacementInvalidReason
			}, "node pve1 has no storage for ISO images, which the machine's user data needs (it reaches the guest as a NoCloud seed ISO); "+
				"add 'iso' to a storage's content, or set the Provider's isoStorage parameter", ""),
		},
		{
			name:     "an isoStorage that holds no ISO images is a permanent error naming it",
			storages: []proxmoxsim.Storage{disks, local},
			param:    "local-lvm",
			err: wantErr(providersdk.IsPermanent, "storage local-lvm, the Provider's isoStorage parameter, holds no ISO images on node pve1, "+
				"which the machine's user data needs; add 'iso' to its content and make it available on the node, or name another storage", ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) { o.Storages = tt.storages })
			p := providerFor(sim)
			p.Spec.Parameters[ParamISOStorage] = tt.param
			cl, err := NewDriver().Connect(context.Background(), infoFor(sim, p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
			s := cl.(*session)
			m := seedMachine("3c9a0f2e-5d1b-4e7a-8f60-0a0b0c0d0e08", "#cloud-config\n", false)
			task, err := observeCreate(t, s, m)
			if tt.err != nil {
				if msg := tt.err(err); msg != "" {
					t.Fatal(msg)
				}
				return
			}
			if err != nil || !task.InFlight() {
				t.Fatalf("Create = %+v, %v; want the upload", task, err)
			}
			if _, err := settle(t, s, m, task); err != nil {
				t.Fatal(err)
			}
			if vols := isos(t, s, tt.want); len(vols) != 1 || !isSeedOf(vols[0], m.UID) {
				t.Errorf("ISOs on %s = %v, want the seed", tt.want, vols)
			}
		})
	}
}
