package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"k8s.io/apimachinery/pkg/util/uuid"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/providersdk/drivertest"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// TestConformance runs the SDK's conformance kit against the Proxmox VE simulator,
// reading the cluster with go-proxmox on a client of its own, not through the driver
// or its pve package.
func TestConformance(t *testing.T) {
	sim := proxmoxtest.Start(t)
	api := proxmox.NewClient(sim.URL, proxmox.WithHTTPClient(sim.HTTPClient()), proxmox.WithAPIToken(sim.TokenID, sim.TokenSecret))
	unreachable := providerFor(sim)
	unreachable.Spec.Connection.Endpoint = "https://127.0.0.1:1/api2/json" // a closed loopback port
	wrong := infoFor(sim, providerFor(sim))
	wrong.Credentials = map[string][]byte{pve.TokenIDKey: []byte(sim.TokenID), pve.TokenSecretKey: []byte("not-the-secret")}
	drivertest.Run(t, drivertest.Backend{
		Driver:       newDriver(sim),
		Provider:     infoFor(sim, providerFor(sim)),
		Unreachable:  infoFor(sim, unreachable),
		Unauthorized: &wrong,
		NewMachine:   func(*testing.T) *providersdk.Machine { return newMachine(string(uuid.NewUUID())) },
		MissingImage: func(m *providersdk.Machine) { m.Spec.Image.Ref = "no-such-template" },
		Count: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			n := 0
			for _, vm := range guestsOf(t, api) {
				if strings.Contains(vm.config["description"], string(m.UID)) || slices.Contains(strings.Split(vm.Tags, ";"), TagPrefix+string(m.UID)) {
					n++
				}
			}
			return n
		},
		Disks: func(t *testing.T, m *providersdk.Machine) int {
			t.Helper()
			for _, vm := range guestsOf(t, api) {
				if slices.Contains(strings.Split(vm.Tags, ";"), TagPrefix+string(m.UID)) {
					n := 0
					for key, val := range vm.config {
						if diskKey.MatchString(key) && !strings.Contains(val, "media=cdrom") {
							n++
						}
					}
					return n
				}
			}
			t.Fatalf("no VM of machine %s", m.UID)
			return 0
		},
		Snapshot: func(t *testing.T) string {
			t.Helper()
			guests := guestsOf(t, api)
			out := make([]string, 0, len(guests))
			for _, vm := range guests {
				conf, _ := json.Marshal(vm.config)
				out = append(out, fmt.Sprintf("%s/%d %s %s lock=%s %s", vm.Node, vm.VMID, vm.Name, vm.Status, vm.Lock, conf))
			}
			slices.Sort(out)
			return strings.Join(out, "\n")
		},
		Released: func(t *testing.T, m *providersdk.Machine, before providersdk.Observation) error {
			t.Helper()
			return releasedVM(t, api, m, before)
		},
		// Someone else's VM that carries the machine's tag, a key the driver finds VMs
		// by, but no description naming the machine's UID.
		Impostor: func(t *testing.T, m *providersdk.Machine) func() bool {
			t.Helper()
			ctx := context.Background()
			var next string
			if err := api.Get(ctx, "/cluster/nextid", &next); err != nil {
				t.Fatal(err)
			}
			var upid string
			if err := api.Post(ctx, "/nodes/"+proxmoxtest.Node1+"/qemu", map[string]any{
				"vmid": strings.TrimSpace(next), "name": "impostor", "tags": TagPrefix + string(m.UID), "description": "not banlieue's",
			}, &upid); err != nil {
				t.Fatal(err)
			}
			waitTask(t, api, upid)
			describe := func() string {
				for _, vm := range guestsOf(t, api) {
					// By its config and its own status: the listing's names, tags and
					// status lag behind (status unknown until pvestatd first reports).
					if vm.config["name"] == "impostor" && strings.Contains(vm.config["tags"], string(m.UID)) {
						var st struct {
							Status string `json:"status"`
						}
						if err := api.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", vm.Node, vm.VMID), &st); err != nil {
							t.Fatal(err)
						}
						conf, _ := json.Marshal(vm.config)
						return fmt.Sprintf("%d %s %s", vm.VMID, st.Status, conf)
					}
				}
				return ""
			}
			before := describe()
			return func() bool {
				after := describe()
				if after != before {
					t.Logf("the impostor before: %q\nafter: %q", before, after)
				}
				return before != "" && after == before
			}
		},
	})
}

// guest is a VM of the cluster as /cluster/resources lists it, with its config.
type guest struct {
	VMID   int    `json:"vmid"`
	Node   string `json:"node"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Tags   string `json:"tags"`
	Lock   string `json:"lock"`
	config map[string]string
}

// diskKey matches the config keys of a VM's disks (and CD-ROMs, told apart by their
// media), as PVE's API documentation names them.
var diskKey = regexp.MustCompile(`^(scsi|virtio|sata|ide)[0-9]+$`)

// guestsOf lists the cluster's VMs and reads each one's config.
func guestsOf(t *testing.T, api *proxmox.Client) []guest {
	t.Helper()
	ctx := context.Background()
	var all []guest
	if err := api.Get(ctx, "/cluster/resources?type=vm", &all); err != nil {
		t.Fatal(err)
	}
	for i := range all {
		var conf map[string]any
		if err := api.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", all[i].Node, all[i].VMID), &conf); err != nil {
			t.Fatal(err)
		}
		all[i].config = map[string]string{}
		for k, v := range conf {
			all[i].config[k] = fmt.Sprint(v)
		}
	}
	return all
}

// waitTask waits for the task upid to end.
func waitTask(t *testing.T, api *proxmox.Client, upid string) {
	t.Helper()
	node := strings.Split(upid, ":")[1]
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var st struct {
			Status string `json:"status"`
		}
		if err := api.Get(context.Background(), "/nodes/"+node+"/tasks/"+upid+"/status", &st); err != nil {
			t.Fatal(err)
		}
		if st.Status != "running" {
			return
		}
	}
	t.Fatalf("task %s did not end", upid)
}

// releasedVM checks, with go-proxmox, the VM a Release let go: still there where
// Observe found it before, in the same power state, with the same disks, without the
// machine's tag or UID. It destroys the VM when the test ends.
func releasedVM(t *testing.T, api *proxmox.Client, m *providersdk.Machine, before providersdk.Observation) error {
	t.Helper()
	at, _ := before.Details.(*infrav1.ProxmoxStatus)
	was, _ := before.State.(*observed)
	if at == nil || was == nil || was.vm == nil {
		return fmt.Errorf("the observation before the release holds no VM: %+v", before)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		path := fmt.Sprintf("/nodes/%s/qemu/%d", at.Node, at.VMID)
		var upid string
		if err := api.Post(ctx, path+"/status/stop", nil, &upid); err == nil {
			waitTask(t, api, upid)
		}
		if err := api.Delete(ctx, path+"?purge=1&destroy-unreferenced-disks=1", &upid); err == nil {
			waitTask(t, api, upid)
		}
	})
	for _, vm := range guestsOf(t, api) {
		if vm.VMID != int(at.VMID) {
			continue
		}
		var errs []error
		if running := vm.Status == "running"; running != (before.PowerState == banlieuev1.PowerStatePoweredOn) {
			errs = append(errs, fmt.Errorf("the VM is %s, it was %s", vm.Status, before.PowerState))
		}
		if slices.Contains(strings.Split(vm.config["tags"], ";"), TagPrefix+string(m.UID)) || strings.Contains(vm.config["description"], string(m.UID)) {
			errs = append(errs, fmt.Errorf("the VM still carries the machine's marks: tags %q, description %q", vm.config["tags"], vm.config["description"]))
		}
		for _, k := range was.vm.conf.DiskKeys() {
			if vm.config[k] != was.vm.conf[k] {
				errs = append(errs, fmt.Errorf("disk %s is %q, it was %q", k, vm.config[k], was.vm.conf[k]))
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("VM %d is gone", at.VMID)
}
