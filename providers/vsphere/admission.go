package vsphere

import (
	"fmt"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Admit refuses, before any call to vCenter, a spec.vsphere that places the VM outside
// what the Provider offers: a datastore that none of its storage classes' targets nor
// parameters.datastore names, another datacenter than parameters.datacenter, a folder
// or resource pool outside parameters.folder or parameters.resourcePool. A Provider that
// pins no datacenter, folder or pool offers the whole inventory its user sees.
func (d *Driver) Admit(p *banlieuev1.Provider, m *providersdk.Machine) error {
	opts := &infrav1.VSphereOptions{}
	if err := m.Options("vsphere", opts); err != nil {
		return err
	}
	params := p.Spec.Parameters
	dc := func(s string) string { return strings.Trim(s, "/") }
	switch {
	case opts.Datastore != "" && !providersdk.ProviderOffers(p, targetDatastore, opts.Datastore):
		return fmt.Errorf("spec.vsphere.datastore %q is not a datastore Provider %s/%s offers (in its storage classes' targets or parameters.datastore)",
			opts.Datastore, p.Namespace, p.Name)
	case opts.Datacenter != "" && params["datacenter"] != "" && dc(opts.Datacenter) != dc(params["datacenter"]):
		return fmt.Errorf("spec.vsphere.datacenter %q is not Provider %s/%s's datacenter (parameters.datacenter)", opts.Datacenter, p.Namespace, p.Name)
	case opts.Folder != "" && !providersdk.WithinPath(opts.Folder, params["folder"]):
		return fmt.Errorf("spec.vsphere.folder %q is outside Provider %s/%s's folder (parameters.folder)", opts.Folder, p.Namespace, p.Name)
	case opts.ResourcePool != "" && !providersdk.WithinPath(opts.ResourcePool, params["resourcePool"]):
		return fmt.Errorf("spec.vsphere.resourcePool %q is outside Provider %s/%s's resource pool (parameters.resourcePool)", opts.ResourcePool, p.Namespace, p.Name)
	}
	return nil
}
