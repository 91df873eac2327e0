package proxmox

import (
	"fmt"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Admit refuses, before any call to Proxmox VE, a spec.proxmox that places the VM
// outside what the Provider offers: a node that is neither one of its failure domains
// nor parameters.node, or a pool outside parameters.pool (a nested pool "a/b" is within
// "a").
func (d *Driver) Admit(p *banlieuev1.Provider, m *providersdk.Machine) error {
	opts := &infrav1.ProxmoxOptions{}
	if err := m.Options("proxmox", opts); err != nil {
		return err
	}
	if node := opts.Node; node != "" && !providersdk.ProviderOffers(p, ParamNode, node) && p.FailureDomain(node) == nil {
		return fmt.Errorf("spec.proxmox.node %q is not a node Provider %s/%s offers (its failure domains or parameters.node)", node, p.Namespace, p.Name)
	}
	if pool := opts.Pool; pool != "" && !providersdk.WithinPath(pool, p.Spec.Parameters[ParamPool]) {
		return fmt.Errorf("spec.proxmox.pool %q is outside Provider %s/%s's pool (parameters.pool)", pool, p.Namespace, p.Name)
	}
	return nil
}
