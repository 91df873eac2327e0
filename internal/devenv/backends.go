package devenv

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// namespace, a credentials Secret and a Provider for each backend. The Providers carry
// the labels examples/ selects (dc, env) and offer the classes examples/ asks for.
func (b *Backends) Objects() []client.Object {
	ns := ProviderNamespace
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vcenter-dc1"},
			StringData: map[string]string{"username": b.VSphere.Username, "password": b.VSphere.Password},
		},
		&banlieuev1.Provider{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vcenter-dc1", Labels: map[string]string{"dc": "dc1", "env": "prod", "backend": "vsphere"}},
			Spec: banlieuev1.ProviderSpec{
				ProviderClassRef: banlieuev1.LocalObjectReference{Name: "vsphere"},
				Connection: banlieuev1.Connection{
					Endpoint:       b.VSphere.URL.String(),
					CredentialsRef: &banlieuev1.LocalObjectReference{Name: "vcenter-dc1"},
					CABundle:       &banlieuev1.CABundle{Inline: string(b.VSphere.CACert)},
				},
				Capabilities: banlieuev1.Capabilities{
					StorageClasses: []banlieuev1.ClassMapping{{Name: "fast-ssd", Target: map[string]string{"datastore": "LocalDS_0"}}},
					NetworkClasses: []banlieuev1.ClassMapping{{Name: "prod-net", Target: map[string]string{"network": "VM Network"}}},
					Features:       []string{"efiSecureBoot"},
				},
				Parameters: map[string]string{"datacenter": "DC0"},
			},
		},
	}
}
