package virtualmachine

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/banlieue/banlieue/pkg/contract"
)

func TestMachineChangedWakesTheVMForWhatItActsOn(t *testing.T) {
	// at returns a machine at resourceVersion rv: generation 1, no status, changed by mods.
	at := func(rv string, mods ...func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"powerState": "PoweredOn"}}}
		u.SetAPIVersion("infrastructure.test.banlieue.io/v1alpha1")
		u.SetKind("TestMachine")
		u.SetNamespace("ns")
		u.SetName("web-1")
		u.SetGeneration(1)
		u.SetResourceVersion(rv)
		for _, m := range mods {
			m(u)
		}
		return u
	}
	set := func(value any, path ...string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) {
			if err := unstructured.SetNestedField(u.Object, runtime.DeepCopyJSONValue(value), path...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// conditions sets status.conditions to Ready with status, reason and message, then
	// the other conditions given.
	conditions := func(status, reason, message string, others ...map[string]any) func(*unstructured.Unstructured) {
		list := make([]any, 0, 1+len(others))
		list = append(list, map[string]any{"type": "Ready", "status": status, "reason": reason, "message": message,
			"lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": int64(1)})
		for _, o := range others {
			list = append(list, o)
		}
		return set(list, "status", "conditions")
	}
	task := func(ref, op string) func(*unstructured.Unstructured) {
		return set(map[string]any{"ref": ref, "operation": op, "startedAt": "2026-12-01T10:00:00Z"}, "status", "task")
	}
	cloning := []func(*unstructured.Unstructured){conditions("False", "Cloning", "clone in progress"), task("task-1", "clone")}
	and := func(base []func(*unstructured.Unstructured), more ...func(*unstructured.Unstructured)) []func(*unstructured.Unstructured) {
		return append(slices.Clone(base), more...)
	}
	for _, tc := range []struct {
		name     string
		old, new *unstructured.Unstructured // as written; the predicate sees them as core's cache holds them
		wake     bool
	}{
		// A step under way giving way to another: nothing the VM shows changes.
		{"no status yet, then Cloning with its task", at("1"), at("2", cloning...), false},
		{"Cloning, then Updating with the next task", at("1", cloning...),
			at("2", conditions("False", "Updating", "update in progress"), task("task-2", "update")), false},
		{"Cloning, with a new message", at("1", cloning...), at("2", conditions("False", "Cloning", "clone 40% done"), task("task-1", "clone")), false},
		{"Cloning, and the task gone", at("1", cloning...), at("2", conditions("False", "Creating", "")), false},
		{"nothing but the resourceVersion, while Cloning", at("1", cloning...), at("2", cloning...), false},

		// The Ready condition's status, or a failure.
		{"Cloning, then Ready", at("1", cloning...), at("2", conditions("True", "Provisioned", "")), true},
		{"Cloning, then Unknown", at("1", cloning...), at("2", conditions("Unknown", "Cloning", ""), task("task-1", "clone")), true},
		{"no status yet, then a failure", at("1"), at("2", conditions("False", "TemplateNotFound", "no template ubuntu")), true},
		{"Cloning, then a failed task", at("1", cloning...), at("2", conditions("False", "TaskFailed", "disk full")), true},
		{"a failure, then Cloning again", at("1", conditions("False", "TaskFailed", "disk full")), at("2", cloning...), true},
		{"a failure's message changes", at("1", conditions("False", "BackendUnreachable", "timeout")),
			at("2", conditions("False", "BackendUnreachable", "connection refused")), true},
		{"Ready, then Updating", at("1", conditions("True", "Provisioned", "")), at("2", conditions("False", "Updating", "")), true},
		{"nothing but the resourceVersion, while Ready", at("1", conditions("True", "Provisioned", "")),
			at("2", conditions("True", "Provisioned", "")), true},

		// Status fields the VM mirrors, and the ones it does not, change with the step.
		{"addresses", at("1", cloning...), at("2", and(cloning, set([]any{map[string]any{"type": "InternalIP", "address": "192.0.2.10"}}, "status", "addresses"))...), true},
		{"initialization", at("1", cloning...), at("2", and(cloning, set(map[string]any{"provisioned": true}, "status", "initialization"))...), true},
		{"powerState", at("1", cloning...), at("2", and(cloning, set("PoweredOff", "status", "powerState"))...), true},
		{"failureDomain", at("1", cloning...), at("2", and(cloning, set("fd-a", "status", "failureDomain"))...), true},
		{"observedGeneration", at("1", cloning...), at("2", and(cloning, set(int64(2), "status", "observedGeneration"))...), true},
		{"another condition", at("1", cloning...),
			at("2", conditions("False", "Cloning", "clone in progress", map[string]any{"type": "GuestReady", "status": "False", "reason": "Booting"}), task("task-1", "clone")), true},
		// What the backend adds is not in core's cache.
		{"the backend's block", at("1", cloning...), at("2", and(cloning, set(map[string]any{"moref": "vm-42"}, "status", "vsphere"))...), false},

		// Metadata and spec, as before.
		{"deletion", at("1", cloning...), at("2", and(cloning, func(u *unstructured.Unstructured) {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		})...), true},
		{"an annotation", at("1", cloning...), at("2", and(cloning, func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"banlieue.io/paused": "x"})
		})...), true},
		{"the spec, with the step", at("1", cloning...), at("2", conditions("False", "Updating", ""), set("PoweredOff", "spec", "powerState"),
			func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		{"the providerID only", at("1", cloning...), at("2", and(cloning, set("test://a", "spec", "providerID"),
			func(u *unstructured.Unstructured) { u.SetGeneration(2) })...), false},
		{"the providerID, then Ready with the new observedGeneration",
			at("1", and(cloning, set("test://a", "spec", "providerID"), func(u *unstructured.Unstructured) { u.SetGeneration(2) })...),
			at("2", conditions("True", "Provisioned", ""), set("test://a", "spec", "providerID"), set(int64(2), "status", "observedGeneration"),
				func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			was, is := cached(t, tc.old), cached(t, tc.new)
			oldCopy := was.DeepCopy()
			if got := machineChanged().Update(event.UpdateEvent{ObjectOld: was, ObjectNew: is}); got != tc.wake {
				t.Errorf("machineChanged().Update = %t, want %t", got, tc.wake)
			}
			if !equality.Semantic.DeepEqual(oldCopy, was) {
				t.Errorf("the predicate changed the cached machine")
			}
		})
	}
	for name, pass := range map[string]bool{
		"create":  machineChanged().Create(event.CreateEvent{Object: cached(t, at("1"))}),
		"delete":  machineChanged().Delete(event.DeleteEvent{Object: cached(t, at("1", cloning...))}),
		"generic": machineChanged().Generic(event.GenericEvent{Object: cached(t, at("1"))}),
	} {
		if !pass {
			t.Errorf("a %s event does not wake the VM", name)
		}
	}
}

// cached returns the machine u as core's cache holds it: decoded from its JSON as a
// contract.Machine of its kind.
func cached(t *testing.T, u *unstructured.Unstructured) *contract.Machine {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(contract.NewScheme(u.GroupVersionKind())).UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*contract.Machine)
}
