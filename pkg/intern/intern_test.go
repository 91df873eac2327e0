package intern_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/intern"
)

// vmJSON is a VM as the API server sends it, the way each copy in a cache is decoded.
const vmJSON = `{"apiVersion":"banlieue.io/v1alpha1","kind":"VirtualMachine",
"metadata":{"name":"web-01","namespace":"default","labels":{"tier":"web"},"finalizers":["banlieue.io/virtualmachine"],
 "managedFields":[{"manager":"kubectl","operation":"Update"}]},
"spec":{"classRef":{"name":"small"},"imageRef":{"name":"debian"},"desiredPowerState":"PoweredOn",
 "placement":{"providerSelector":{"matchLabels":{"env":"prod"}}}},
"status":{"conditions":[{"type":"Ready","status":"True","reason":"Running","message":"placed on Provider infra/vcenter-dc1",
 "lastTransitionTime":"2026-12-06T12:06:07Z"}],"addresses":[{"type":"InternalIP","address":"198.18.0.4"}]}}`

func decodeVM(t *testing.T) *banlieuev1.VirtualMachine {
	t.Helper()
	vm := &banlieuev1.VirtualMachine{}
	if err := json.Unmarshal([]byte(vmJSON), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestStringsMakesEqualStringsOfTwoObjectsShareTheirBytes(t *testing.T) {
	a, b := decodeVM(t), decodeVM(t)
	if same(a.Status.Conditions[0].Message, b.Status.Conditions[0].Message) {
		t.Fatal("two decodes already share a string; the test cannot tell interning apart")
	}
	want := a.DeepCopy()
	intern.Strings(a)
	intern.Strings(b)

	if !equality.Semantic.DeepEqual(a, want) {
		t.Fatalf("interning changed the object:\n got %+v\nwant %+v", a, want)
	}
	for _, tc := range []struct {
		field string
		a, b  string
	}{
		{"a struct's field", a.Spec.ClassRef.Name, b.Spec.ClassRef.Name},
		{"a named string type", string(a.Spec.DesiredPowerState), string(b.Spec.DesiredPowerState)},
		{"an element of a slice of structs", a.Status.Conditions[0].Message, b.Status.Conditions[0].Message},
		{"an element of a slice of strings", a.Finalizers[0], b.Finalizers[0]},
		{"a map's value", a.Labels["tier"], b.Labels["tier"]},
		{"a map's key", keyOf(a.Labels), keyOf(b.Labels)},
		{"behind a pointer", a.Spec.Placement.ProviderSelector.MatchLabels["env"], b.Spec.Placement.ProviderSelector.MatchLabels["env"]},
	} {
		if !same(tc.a, tc.b) {
			t.Errorf("%s: %q is held twice", tc.field, tc.a)
		}
	}
}

func keyOf(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

func TestStringsInternsAnUnstructuredObject(t *testing.T) {
	decode := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(vmJSON)); err != nil {
			t.Fatal(err)
		}
		return u
	}
	a, b := decode(), decode()
	want := a.DeepCopy()
	intern.Strings(a)
	intern.Strings(b)
	if !equality.Semantic.DeepEqual(a, want) {
		t.Fatalf("interning changed the object:\n got %v\nwant %v", a, want)
	}
	msg := func(u *unstructured.Unstructured) string {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return conds[0].(map[string]any)["message"].(string)
	}
	if !same(msg(a), msg(b)) {
		t.Errorf("a string in a []any in a map[string]any is held twice")
	}
	if !same(a.GetKind(), b.GetKind()) {
		t.Errorf("a string in a map[string]any is held twice")
	}
}

func TestTransformStripsManagedFieldsAndInterns(t *testing.T) {
	a, b := decodeVM(t), decodeVM(t)
	transform := intern.Transform()
	for _, vm := range []*banlieuev1.VirtualMachine{a, b} {
		out, err := transform(vm)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(metav1.Object).GetManagedFields(); got != nil {
			t.Errorf("managedFields kept: %v", got)
		}
	}
	if !same(string(a.Status.Addresses[0].Type), string(b.Status.Addresses[0].Type)) {
		t.Errorf("the transform did not intern")
	}
}

func TestStringsLeavesWhatItCannotChange(t *testing.T) {
	vm := decodeVM(t)
	for _, obj := range []any{nil, *vm, (*banlieuev1.VirtualMachine)(nil), 42} {
		intern.Strings(obj) // must not panic
	}
}

// BenchmarkStrings is the cost of interning one decoded VM as it enters a cache.
func BenchmarkStrings(b *testing.B) {
	vm := &banlieuev1.VirtualMachine{}
	if err := json.Unmarshal([]byte(vmJSON), vm); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		intern.Strings(vm)
	}
}

func TestStringsMakesEqualSmallMapsOfTwoObjectsOne(t *testing.T) {
	a, b, other := decodeVM(t), decodeVM(t), decodeVM(t)
	other.Labels["tier"] = "db"
	for _, vm := range []*banlieuev1.VirtualMachine{a, b, other} {
		intern.Strings(vm)
	}
	mapOf := func(m map[string]string) uintptr { return reflect.ValueOf(m).Pointer() }
	if mapOf(a.Labels) != mapOf(b.Labels) {
		t.Errorf("equal labels are two maps")
	}
	if sel := func(vm *banlieuev1.VirtualMachine) map[string]string {
		return vm.Spec.Placement.ProviderSelector.MatchLabels
	}; mapOf(sel(a)) != mapOf(sel(b)) {
		t.Errorf("equal selectors behind a pointer are two maps")
	}
	if mapOf(a.Labels) == mapOf(other.Labels) || other.Labels["tier"] != "db" {
		t.Errorf("labels that differ were made one: %v", other.Labels)
	}
	if mapOf(a.Labels) == mapOf(a.Spec.Placement.ProviderSelector.MatchLabels) {
		t.Errorf("maps that differ were made one")
	}
}
