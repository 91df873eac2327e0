package contract

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FuzzAccessors feeds the contract's accessors whatever a machine object can hold: they
// must never panic, and a spec they read must come back the same through NewMachine.
func FuzzAccessors(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"providerRef":{"namespace":"infra","name":"vc1"},"image":{"name":"u","kind":"Template"},"hardware":{"cpus":2,"memoryMiB":2048}}}`,
		`{"spec":{"providerID":"vsphere://x","disks":[{"name":"root","sizeGiB":10,"storageClass":"fast","target":{"datastore":"ds"}}]}}`,
		`{"status":{"initialization":{"provisioned":true},"addresses":[{"type":"InternalIP","address":"192.0.2.1"}],"conditions":[{"type":"Ready","status":"True"}]}}`,
		`{"spec":"not an object"}`,
		`{"status":[1,2,3]}`,
		`{"spec":{"hardware":{"cpus":"two"}}}`,
		`{"spec":{"disks":{"name":"root"}}}`,
		`{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj := map[string]any{}
		if err := json.Unmarshal(data, &obj); err != nil {
			return
		}
		u := &unstructured.Unstructured{Object: obj}
		_ = ProviderID(u)
		_, _ = Status(u)
		spec, err := Spec(u)
		if err != nil {
			return
		}
		m, err := NewMachine(gvk, "ns", "name", spec)
		if err != nil {
			t.Fatalf("NewMachine of a spec Spec read: %v", err)
		}
		again, err := Spec(m)
		if err != nil {
			t.Fatalf("Spec of a machine NewMachine made: %v", err)
		}
		spec.ProviderID = "" // NewMachine never writes the provider's field
		if diff := cmp.Diff(spec, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("spec changed through NewMachine (-read +again):\n%s", diff)
		}
	})
}
