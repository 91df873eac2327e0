package providersdk_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/providersdk/drivertest"
)

// TestMemcloudConforms runs the SDK's conformance kit against the worked example's
// driver, as docs/provider-authoring.md tells every provider to: the same table the
// vSphere, libvirt and Proxmox VE drivers pass against their backends.
func TestMemcloudConforms(t *testing.T) {
	lab := &memcloud{token: "s3cret", templates: map[string]string{"ubuntu-22-04": "tpl-7"},
		vms: map[string]*memVM{}, tasks: map[string]int{}}
	provider := func(endpoint, token string) providersdk.ProviderInfo {
		return providersdk.ProviderInfo{
			Provider:    &banlieuev1.Provider{Spec: banlieuev1.ProviderSpec{Connection: banlieuev1.Connection{Endpoint: endpoint}}},
			Credentials: map[string][]byte{"token": []byte(token)},
		}
	}
	wrong := provider("https://memcloud.lab", "wrong")
	drivertest.Run(t, drivertest.Backend{
		Driver:       &memDriver{backends: map[string]*memcloud{"https://memcloud.lab": lab}},
		Provider:     provider("https://memcloud.lab", "s3cret"),
		Unreachable:  provider("https://127.0.0.1:1", "s3cret"),
		Unauthorized: &wrong,
		NewMachine: func(*testing.T) *providersdk.Machine {
			uid := uuid.NewUUID()
			return &providersdk.Machine{UID: uid, Namespace: "team-a", Name: "vm-" + string(uid)[:8], Spec: infrav1.MachineSpec{
				Image:    infrav1.MachineImage{Name: "ubuntu-22-04", Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-22-04"},
				Hardware: infrav1.MachineHardware{CPUs: 2, MemoryMiB: 2048},
			}}
		},
		MissingImage: func(m *providersdk.Machine) { m.Spec.Image.Ref = "no-such-template" },
		Count: func(_ *testing.T, m *providersdk.Machine) int {
			lab.mu.Lock()
			defer lab.mu.Unlock()
			n := 0
			for _, vm := range lab.vms {
				if vm.tag == string(m.UID) {
					n++
				}
			}
			return n
		},
		Snapshot: func(*testing.T) string {
			lab.mu.Lock()
			defer lab.mu.Unlock()
			out := make([]string, 0, len(lab.vms)+len(lab.tasks))
			for _, vm := range lab.vms {
				out = append(out, fmt.Sprintf("%+v", *vm))
			}
			for task, left := range lab.tasks {
				out = append(out, fmt.Sprintf("%s:%d", task, left))
			}
			slices.Sort(out)
			return strings.Join(out, " ")
		},
		Impostor: func(_ *testing.T, m *providersdk.Machine) func() bool {
			lab.mu.Lock()
			defer lab.mu.Unlock()
			impostor := memVM{id: "vm-impostor-" + string(m.UID), tag: string(types.UID("someone-else")), name: providersdk.BackendName(m.Namespace, m.Name, vmNames), cpus: 1, memoryMiB: 512}
			lab.vms[impostor.id] = &impostor
			return func() bool {
				lab.mu.Lock()
				defer lab.mu.Unlock()
				vm, ok := lab.vms[impostor.id]
				return ok && *vm == impostor
			}
		},
	})
}
