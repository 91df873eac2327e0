package libvirt

import (
	"fmt"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Admit refuses, before any call to libvirtd, a spec.libvirt whose storagePool is not
// one the Provider offers: parameters.pool or a pool of its storage classes' targets.
func (d *Driver) Admit(p *banlieuev1.Provider, m *providersdk.Machine) error {
	opts := &infrav1.LibvirtOptions{}
	if err := m.Options("libvirt", opts); err != nil {
		return err
	}
	if pool := opts.StoragePool; pool != "" && !providersdk.ProviderOffers(p, TargetPool, pool) {
		return fmt.Errorf("spec.libvirt.storagePool %q is not a pool Provider %s/%s offers (parameters.pool or its storage classes' targets)",
			pool, p.Namespace, p.Name)
	}
	return nil
}
