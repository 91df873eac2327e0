package contract

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

var gvk = schema.GroupVersionKind{Group: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "VSphereMachine"}

func TestNewMachineRoundTrip(t *testing.T) {
	want := infrav1.MachineSpec{
		ProviderRef:   infrav1.ProviderRef{Namespace: "infra", Name: "vc1"},
		FailureDomain: "dc1-c1",
		Image:         infrav1.MachineImage{Name: "ubuntu", Kind: banlieuev1.ImageSourceTemplate, Ref: "tpl"},
		Hardware:      infrav1.MachineHardware{CPUs: 2, MemoryMiB: 4096, Firmware: banlieuev1.FirmwareEFI},
		Disks:         []infrav1.MachineDisk{{Name: "root", SizeGiB: 20, StorageClass: "fast", Target: map[string]string{"datastore": "ds1"}}},
		PowerState:    banlieuev1.PowerStatePoweredOn,
	}
	in := want
	in.ProviderID = "vsphere://must-not-be-written"
	u, err := NewMachine(gvk, "ns", "vm1", in)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetKind() != "VSphereMachine" || u.GetNamespace() != "ns" || u.GetName() != "vm1" {
		t.Errorf("identity = %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	}
	// The provider's finalizer is there from the start: the machine cannot go before
	// its provider has seen it.
	if diff := cmp.Diff([]string{"infrastructure.banlieue.io/vspheremachine"}, u.GetFinalizers()); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	got, err := Spec(u)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec round trip (-want +got):\n%s", diff)
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name    string
		object  map[string]any
		want    infrav1.MachineStatus
		wantErr bool
	}{
		{
			name:   "a machine with no status reads as the zero status",
			object: map[string]any{},
		},
		{
			name: "a provisioned machine reports its addresses, power state and Ready condition",
			object: map[string]any{"status": map[string]any{
				"initialization": map[string]any{"provisioned": true},
				"addresses":      []any{map[string]any{"type": "InternalIP", "address": "10.0.0.5"}},
				"powerState":     "PoweredOn",
				"backendOnly":    "ignored",
				"conditions": []any{map[string]any{
					"type": "Ready", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
				}},
			}},
			want: infrav1.MachineStatus{
				Initialization: infrav1.MachineInitialization{Provisioned: ptr.To(true)},
				Addresses:      []banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: "10.0.0.5"}},
				PowerState:     banlieuev1.PowerStatePoweredOn,
				Conditions: []metav1.Condition{{
					Type: "Ready", Status: metav1.ConditionTrue, Reason: "Provisioned",
					LastTransitionTime: metav1.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
				}},
			},
		},
		{
			name:    "a status that is not an object is an error",
			object:  map[string]any{"status": "broken"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Status(&unstructured.Unstructured{Object: tt.object})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProviderID(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"providerID": "libvirt://h/u"}}}
	if got := ProviderID(u); got != "libvirt://h/u" {
		t.Errorf("ProviderID = %q", got)
	}
	if got := ProviderID(&unstructured.Unstructured{Object: map[string]any{}}); got != "" {
		t.Errorf("ProviderID of empty machine = %q", got)
	}
}

func TestOnlyProviderIDChanged(t *testing.T) {
	machine := func(providerID, rv string, status map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"powerState": "PoweredOn"}
		if providerID != "" {
			spec["providerID"] = providerID
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		if status != nil {
			u.Object["status"] = status
		}
		u.SetResourceVersion(rv)
		// Writing spec.providerID advances the generation, as any spec write does.
		u.SetGeneration(1)
		if providerID != "" {
			u.SetGeneration(2)
		}
		return u
	}
	ready := map[string]any{"observedGeneration": int64(2)}
	for _, tc := range []struct {
		name     string
		old, new *unstructured.Unstructured
		want     bool
	}{
		{"the providerID written, nothing else", machine("", "1", nil), machine("vsphere://a", "2", nil), true},
		{"the providerID and the status", machine("", "1", nil), machine("vsphere://a", "2", ready), false},
		{"the status only", machine("vsphere://a", "1", nil), machine("vsphere://a", "2", ready), false},
		{"nothing but the resourceVersion", machine("vsphere://a", "1", nil), machine("vsphere://a", "2", nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OnlyProviderIDChanged(tc.old, tc.new); got != tc.want {
				t.Errorf("OnlyProviderIDChanged = %t, want %t", got, tc.want)
			}
		})
	}
}
