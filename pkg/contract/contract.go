package contract

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
)

// Version is the machine-contract version this package implements.
const Version = infrav1.ContractVersion

// Label is the label that marks a CRD as implementing the machine contract.
const Label = infrav1.ContractLabel

// Finalizer returns the finalizer a machine of kind gk carries until its provider has
// deleted the backend VM: "<group>/<lowercase kind>". The provider owns it and removes
// it; core creates every machine with it already in place, so a machine can never be
// deleted before its provider has seen it, and the provider needs no write to add it.
func Finalizer(gk schema.GroupKind) string { return gk.Group + "/" + strings.ToLower(gk.Kind) }

// NewMachine returns an infrastructure machine of kind gvk carrying spec, the part of
// the spec that core owns, and the provider's Finalizer. spec.providerID is never
// written here: it is the provider's.
func NewMachine(gvk schema.GroupVersionKind, namespace, name string, spec infrav1.MachineSpec) (*unstructured.Unstructured, error) {
	spec.ProviderID = ""
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return nil, fmt.Errorf("failed to convert machine spec: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": m}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetFinalizers([]string{Finalizer(gvk.GroupKind())})
	return u, nil
}

// Spec reads the contract's part of an infrastructure machine's spec. Fields a backend
// adds next to it are ignored.
func Spec(u *unstructured.Unstructured) (infrav1.MachineSpec, error) {
	var spec infrav1.MachineSpec
	err := fromField(u, "spec", &spec)
	return spec, err
}

// Status reads the contract's part of an infrastructure machine's status. A machine
// that has no status yet gives the zero MachineStatus.
func Status(u *unstructured.Unstructured) (infrav1.MachineStatus, error) {
	var status infrav1.MachineStatus
	err := fromField(u, "status", &status)
	return status, err
}

// ProviderID returns spec.providerID, or "" when the provider has not written it yet.
func ProviderID(u *unstructured.Unstructured) string {
	id, _, _ := unstructured.NestedString(u.Object, "spec", "providerID")
	return id
}

func fromField(u *unstructured.Unstructured, field string, into any) error {
	raw, ok := u.Object[field]
	if !ok || raw == nil {
		return nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s/%s: %s is a %T, not an object", u.GetKind(), u.GetNamespace(), u.GetName(), field, raw)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, into); err != nil {
		return fmt.Errorf("failed to read %s of %s %s/%s: %w", field, u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// OnlyProviderIDChanged reports whether spec.providerID is all that differs between two
// versions of a machine, besides what every write changes (resourceVersion, generation,
// managedFields). The provider writes spec.providerID once, right before the status that
// carries the same news; neither core nor the provider needs to wake for it.
func OnlyProviderIDChanged(o, n *unstructured.Unstructured) bool {
	// Most updates are status writes, which leave the generation alone: they need no copy.
	if o.GetGeneration() == n.GetGeneration() || ProviderID(o) == ProviderID(n) {
		return false
	}
	rest := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "spec", "providerID")
		for _, f := range []string{"resourceVersion", "generation", "managedFields"} {
			unstructured.RemoveNestedField(c.Object, "metadata", f)
		}
		return c.Object
	}
	return equality.Semantic.DeepEqual(rest(o), rest(n))
}

// ProviderRef reads spec.providerRef, the Provider the machine runs on; the zero
// ProviderRef when the machine names none.
func ProviderRef(u *unstructured.Unstructured) infrav1.ProviderRef {
	ns, _, _ := unstructured.NestedString(u.Object, "spec", "providerRef", "namespace")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "providerRef", "name")
	return infrav1.ProviderRef{Namespace: ns, Name: name}
}

// Condition reads the machine's status condition of type t: its status, reason,
// message and observedGeneration (lastTransitionTime is left zero, which no caller
// compares). It returns nil when the machine has no such condition, and an error when
// status.conditions is not a list of objects. It reads the fields in place, without a
// conversion of the whole status: core calls it for every machine update it sees.
func Condition(u *unstructured.Unstructured, t string) (*metav1.Condition, error) {
	conditions, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: status.conditions is not a list: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s %s/%s: a status condition is a %T, not an object", u.GetKind(), u.GetNamespace(), u.GetName(), c)
		}
		if m["type"] != t {
			continue
		}
		cond := &metav1.Condition{Type: t}
		status, _ := m["status"].(string)
		cond.Status = metav1.ConditionStatus(status)
		cond.Reason, _ = m["reason"].(string)
		cond.Message, _ = m["message"].(string)
		cond.ObservedGeneration, _, _ = unstructured.NestedInt64(m, "observedGeneration")
		return cond, nil
	}
	return nil, nil
}

// statusFields are the JSON names of MachineStatus's fields: the status every machine
// kind shares, which Status reads.
var statusFields = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[infrav1.MachineStatus]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}()

// TrimStatus is a cache transform (controller-runtime's cache.Options.DefaultTransform)
// for a reader that reads machines through Spec and Status alone: from the status of
// each infrastructure machine it removes the backend's own block (status.vsphere, say)
// and the shared fields drop names, so that a cache of thousands of machines holds only
// what its reader looks at. Other objects pass unchanged. A cache so trimmed must not
// be the base of a status update of the machine.
func TrimStatus(drop ...string) func(any) (any, error) {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GroupVersionKind().Group != infrav1.GroupVersion.Group {
			return obj, nil
		}
		status, ok := u.Object["status"].(map[string]any)
		if !ok {
			return obj, nil
		}
		for k := range status {
			if !statusFields[k] || slices.Contains(drop, k) {
				delete(status, k)
			}
		}
		return u, nil
	}
}
