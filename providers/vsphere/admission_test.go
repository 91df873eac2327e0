package vsphere

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func TestAdmitRefusesASpecVSphereOutsideItsProvider(t *testing.T) {
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "vc"},
		Spec: banlieuev1.ProviderSpec{
			Parameters: map[string]string{"datacenter": "DC0", "folder": "/DC0/vm/team-a", "resourcePool": "team-a"},
			Capabilities: banlieuev1.Capabilities{StorageClasses: []banlieuev1.ClassMapping{
				{Name: "fast", Target: map[string]string{targetDatastore: "LocalDS_0"}},
			}},
		},
	}
	for _, tt := range []struct {
		name  string
		block map[string]any
		want  string
	}{
		{"no block is admitted", nil, ""},
		{"a datastore of a storage class is admitted", map[string]any{"datastore": "LocalDS_0"}, ""},
		{"a folder below the Provider's is admitted", map[string]any{"folder": "/DC0/vm/team-a/web"}, ""},
		{"the Provider's datacenter as a path is admitted", map[string]any{"datacenter": "/DC0"}, ""},
		{"a datastore no class offers is refused", map[string]any{"datastore": "tenant-b-ds"}, `spec.vsphere.datastore "tenant-b-ds"`},
		{"another datacenter is refused", map[string]any{"datacenter": "DC1"}, `spec.vsphere.datacenter "DC1"`},
		{"a folder beside the Provider's is refused", map[string]any{"folder": "/DC0/vm/team-b"}, `spec.vsphere.folder "/DC0/vm/team-b"`},
		{"a resource pool outside the Provider's is refused", map[string]any{"resourcePool": "team-b"}, `spec.vsphere.resourcePool "team-b"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := map[string]any{}
			if tt.block != nil {
				spec["vsphere"] = tt.block
			}
			m := &providersdk.Machine{Namespace: "team-a", Name: "web", Object: &unstructured.Unstructured{Object: map[string]any{"spec": spec}}}
			err := NewDriver().Admit(p, m)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Admit = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Admit = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
