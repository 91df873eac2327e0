package devenv

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

// ProviderNamespace is where 'banlieue dev' puts the Providers of its simulated backends
// and their credentials.
const ProviderNamespace = "infra"

// Backends are the simulated backends of 'banlieue dev'.
type Backends struct {
	// VSphere is the simulated vCenter.
	VSphere *vspheresim.Simulator
}

// StartBackends starts the simulated backends on loopback.
func StartBackends() (*Backends, error) {
	vs, err := vspheresim.Start(vspheresim.Options{Templates: []string{"ubuntu-22.04-template"}, GuestAddressDelay: time.Second})
	if err != nil {
		return nil, fmt.Errorf("failed to start the vCenter simulator: %w", err)
	}
	return &Backends{VSphere: vs}, nil
}

// Stop stops the simulated backends.
func (b *Backends) Stop() { b.VSphere.Stop() }

// Objects are the Kubernetes objects that point banlieue at the simulated backends: a
// namespace, and a credentials Secret and a Provider for each backend.
func (b *Backends) Objects() []client.Object {
	return append([]client.Object{&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ProviderNamespace}}},
		VSphereObjects(b.VSphere)...)
}

// VSphereObjects are the Secret and the Provider (infra/vcenter-dc1) for the simulated
// vCenter vs. The Provider carries the labels examples/ selects (dc, env) and offers the
// storage and network classes examples/ asks for.
func VSphereObjects(vs *vspheresim.Simulator) []client.Object {
	ns, name := ProviderNamespace, "vcenter-dc1"
	return []client.Object{
		&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			StringData: map[string]string{"username": vs.Username, "password": vs.Password},
		},
		&banlieuev1.Provider{
			TypeMeta:   metav1.TypeMeta{APIVersion: banlieuev1.GroupVersion.String(), Kind: "Provider"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"dc": "dc1", "env": "prod", "backend": "vsphere"}},
			Spec: banlieuev1.ProviderSpec{
				ProviderClassRef: banlieuev1.LocalObjectReference{Name: "vsphere"},
				Connection: banlieuev1.Connection{
					Endpoint:       vs.URL.String(),
					CredentialsRef: &banlieuev1.LocalObjectReference{Name: name},
					CABundle:       &banlieuev1.CABundle{Inline: string(vs.CACert)},
				},
				Capabilities: banlieuev1.Capabilities{
					StorageClasses: []banlieuev1.ClassMapping{{Name: "fast-ssd", Target: map[string]string{"datastore": vspheresim.Datastore}}},
					NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod-net", Target: map[string]string{"network": vspheresim.Network}}},
					Features:       []string{"efiSecureBoot"},
				},
				Parameters: map[string]string{"datacenter": vspheresim.Datacenter},
			},
		},
	}
}

// Manifest renders objs as a multi-document YAML manifest, without the empty fields
// (creationTimestamp, status) a typed object carries.
func Manifest(objs ...client.Object) (string, error) {
	var docs []string
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return "", fmt.Errorf("failed to convert %s: %w", client.ObjectKeyFromObject(o), err)
		}
		unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
		delete(u, "status")
		data, err := yaml.Marshal(u)
		if err != nil {
			return "", fmt.Errorf("failed to render %s: %w", client.ObjectKeyFromObject(o), err)
		}
		docs = append(docs, string(data))
	}
	return strings.Join(docs, "---\n"), nil
}
