package contract

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
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
