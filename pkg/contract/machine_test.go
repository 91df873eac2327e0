package contract

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// A machine of the scheme's kind decodes as a Machine: its metadata and the contract's
// spec and status, without what the backend adds; a machine of another kind does not.
func TestNewSchemeDecodesTheContractAlone(t *testing.T) {
	decoder := serializer.NewCodecFactory(NewScheme(gvk)).UniversalDeserializer()
	obj, _, err := decoder.Decode([]byte(`{
		"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
		"metadata": {"name": "web", "namespace": "team-a", "generation": 2},
		"spec": {"providerID": "vsphere://1", "powerState": "PoweredOn", "vsphere": {"folder": "/dc1/vm"}},
		"status": {
			"conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "",
				"lastTransitionTime": "2026-12-05T10:00:00Z", "observedGeneration": 2}],
			"powerState": "PoweredOn",
			"task": {"ref": "task-1", "operation": "Clone"},
			"vsphere": {"moRef": "vm-42", "instanceUUID": "5012"}
		}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*Machine)
	if !ok {
		t.Fatalf("decoded a %T", obj)
	}
	want := &Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: "infrastructure.banlieue.io/v1alpha1", Kind: "VSphereMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", Generation: 2},
		Spec:       infrav1.MachineSpec{ProviderID: "vsphere://1", PowerState: banlieuev1.PowerStatePoweredOn},
		Status: infrav1.MachineStatus{
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Provisioned",
				LastTransitionTime: metav1.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), ObservedGeneration: 2}},
			PowerState: banlieuev1.PowerStatePoweredOn,
			Task:       infrav1.TaskReference{Ref: "task-1", Operation: "Clone"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded machine (-want +got):\n%s", diff)
	}

	other := `{"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "ProxmoxMachine", "metadata": {"name": "web"}}`
	if _, _, err := decoder.Decode([]byte(other), nil, nil); err == nil {
		t.Error("a machine of another kind decoded")
	}
}
