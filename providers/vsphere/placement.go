package vsphere

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// placement is where a machine's VM, or an imported template, goes.
type placement struct {
	// fd is the failure domain; nil for an existing VM on a host in no cluster.
	fd     *failureDomain
	folder vcenter.Ref
	pool   vcenter.Ref
	// host is the host a new VM goes on, one of the failure domain's: vCenter (and
	// vcsim) may otherwise keep the template's host, in another cluster.
	host vcenter.Ref
	// datastore holds the VM's home and boot disk; nil leaves them with the template's.
	datastore *vcenter.Datastore
	linked    bool
}

// place decides the failure domain, folder, resource pool and datastore of a new VM:
// the machine's spec.vsphere first, then the Provider's parameters, then the failure
// domain's defaults.
func (s *session) place(ctx context.Context, m *providersdk.Machine, opts *infrav1.VSphereOptions) (*placement, error) {
	fd, err := s.failureDomain(ctx, m.Spec.FailureDomain)
	if err != nil {
		return nil, err
	}
	if dc := opts.Datacenter; dc != "" && dc != fd.datacenterName && dc != fd.datacenterPath {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"spec.vsphere.datacenter %q is not the datacenter of failure domain %q (%s)", dc, fd.name, fd.datacenterPath)
	}
	pl := &placement{fd: fd, folder: fd.vmFolder, pool: fd.resourcePool, linked: opts.CloneMode == "linked"}
	if f := first(opts.Folder, s.params.folder); f != "" {
		if pl.folder, err = s.findPath(ctx, fd.datacenterPath+"/vm", f, "folder", "Folder"); err != nil {
			return nil, err
		}
	}
	if rp := first(opts.ResourcePool, s.params.resourcePool); rp != "" {
		if pl.pool, err = s.findPath(ctx, fd.clusterPath+"/Resources", rp, "resource pool", "ResourcePool", "VirtualApp"); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Datastore != "":
		pl.datastore, err = fd.datastore(opts.Datastore)
	case len(m.Spec.Disks) > 0 && hasStorageKey(m.Spec.Disks[0].Target):
		pl.datastore, err = fd.diskDatastore(m.Spec.Disks[0])
	case s.params.datastore != "":
		pl.datastore, err = fd.datastore(s.params.datastore)
	}
	if err != nil {
		return nil, err
	}
	pl.host, err = fd.pickHost(vmName(m.Namespace, m.Name), pl.datastore)
	return pl, err
}

// pickHost picks the host of a new VM among the failure domain's hosts that can take
// it and mount the datastore (when there is one), spreading VMs by name hash: the same
// name always picks the same host while the hosts stay the same.
func (fd *failureDomain) pickHost(name string, ds *vcenter.Datastore) (vcenter.Ref, error) {
	var hosts []vcenter.Ref
	for _, h := range fd.hosts {
		if ds == nil || slices.Contains(h.datastores, ds.Ref) {
			hosts = append(hosts, h.ref)
		}
	}
	if len(hosts) == 0 {
		what := "no connected host out of maintenance mode"
		if ds != nil {
			what += " that mounts datastore " + quote(ds.Name)
		}
		return vcenter.Ref{}, providersdk.Retryable(infrav1.MachinePlacementInvalidReason,
			"failure domain %q has %s; the VM is created once one has", fd.name, what)
	}
	sum := fnv.New32a()
	_, _ = sum.Write([]byte(name))
	return hosts[sum.Sum32()%uint32(len(hosts))], nil
}

// placementOf is where an existing VM is, for the disks a resize adds: its host's
// failure domain, with no default datastore (new disks go with the VM).
func (s *session) placementOf(ctx context.Context, vm *vcenter.VM) *placement {
	return &placement{fd: s.domainByHost(ctx, vm.Host)}
}

// failureDomain finds a failure domain by name, discovering the inventory again when it
// is not known. An empty name is the only failure domain, when there is one.
func (s *session) failureDomain(ctx context.Context, name string) (*failureDomain, error) {
	for _, refresh := range []bool{false, true} {
		inv, err := s.domains(ctx, refresh)
		if err != nil {
			return nil, err
		}
		if name == "" && len(inv.domains) == 1 {
			return inv.domains[0], nil
		}
		if fd := inv.byName[name]; fd != nil {
			return fd, nil
		}
	}
	if name == "" {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"spec.failureDomain is empty and vCenter %s does not have exactly one failure domain", s.host)
	}
	return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "failure domain %q does not exist on vCenter %s", name, s.host)
}

// findPath finds an object by inventory path; a relative path is taken from base.
func (s *session) findPath(ctx context.Context, base, path, what string, kinds ...string) (vcenter.Ref, error) {
	full := path
	if !strings.HasPrefix(path, "/") {
		full = base + "/" + path
	}
	ref, err := s.vc.FindByInventoryPath(ctx, full, what)
	if vcenter.IsNotFound(err) {
		return vcenter.Ref{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "%s %q does not exist on vCenter %s", what, full, s.host)
	}
	if err != nil {
		return vcenter.Ref{}, err
	}
	for _, k := range kinds {
		if ref.Type == k {
			return ref, nil
		}
	}
	return vcenter.Ref{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "%q is a %s, not a %s", full, ref.Type, what)
}

// disks are the machine's disks as a resize makes them, each on its datastore.
func (pl *placement) disks(m *providersdk.Machine) ([]vcenter.Disk, error) {
	out := make([]vcenter.Disk, 0, len(m.Spec.Disks))
	for _, d := range m.Spec.Disks {
		disk, err := pl.disk(d)
		if err != nil {
			return nil, err
		}
		out = append(out, disk)
	}
	return out, nil
}

// disk is one of the machine's disks on its datastore.
func (pl *placement) disk(d infrav1.MachineDisk) (vcenter.Disk, error) {
	ds, err := pl.diskTarget(d)
	if err != nil {
		return vcenter.Disk{}, err
	}
	return vcenter.Disk{Bytes: int64(d.SizeGiB) * providersdk.GiB, Provisioning: provisioning(d.Provisioning), Datastore: ds}, nil
}

// diskTarget is the datastore of a disk: its storage class target, else the placement's.
func (pl *placement) diskTarget(d infrav1.MachineDisk) (*vcenter.Datastore, error) {
	if pl.fd != nil && hasStorageKey(d.Target) {
		return pl.fd.diskDatastore(d)
	}
	return pl.datastore, nil
}

// provisioning is a disk's provisioning as vSphere takes it.
func provisioning(p banlieuev1.DiskProvisioning) vcenter.Provisioning {
	switch p {
	case banlieuev1.DiskProvisioningThin:
		return vcenter.ProvisioningThin
	case banlieuev1.DiskProvisioningThick:
		return vcenter.ProvisioningThick
	case banlieuev1.DiskProvisioningEagerZeroed:
		return vcenter.ProvisioningEagerZeroed
	}
	return vcenter.ProvisioningDefault
}

// importDatastore is where imports go: the datastore parameter, else the failure
// domain's datastore with the most free space.
func (pl *placement) importDatastore() vcenter.Ref {
	if pl.datastore != nil {
		return pl.datastore.Ref
	}
	var best vcenter.Datastore
	for _, ds := range pl.fd.datastores {
		if best.Ref.IsZero() || ds.FreeBytes > best.FreeBytes || ds.FreeBytes == best.FreeBytes && ds.Name < best.Name {
			best = ds
		}
	}
	return best.Ref
}

// datastore finds a datastore by name among those the failure domain reaches.
func (fd *failureDomain) datastore(name string) (*vcenter.Datastore, error) {
	ds, ok := fd.datastores[name]
	if !ok {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"datastore %q is not reachable from failure domain %q", name, fd.name)
	}
	return &ds, nil
}

// diskDatastore finds the datastore of a disk's storage class target; nil when the
// target has no vSphere key.
func (fd *failureDomain) diskDatastore(d infrav1.MachineDisk) (*vcenter.Datastore, error) {
	ds, ok, what := fd.storageTarget(d.Target)
	if !ok {
		return nil, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"disk %q: %s of storage class %q is not reachable from failure domain %q", d.Name, what, d.StorageClass, fd.name)
	}
	if ds.Ref.IsZero() {
		return nil, nil
	}
	return &ds, nil
}

// storageTarget picks the datastore a storage class target names in this failure
// domain: its datastore, or the emptiest datastore of its datastore cluster. ok is false
// when the target names storage the cluster cannot reach; a target without a vSphere key
// is ok with no datastore.
func (fd *failureDomain) storageTarget(target map[string]string) (ds vcenter.Datastore, ok bool, what string) {
	if name, ok := target[targetDatastore]; ok {
		ds, found := fd.datastores[name]
		return ds, found, "datastore " + quote(name)
	}
	if name, ok := target[targetDatastoreCluster]; ok {
		members := fd.pods[name]
		if len(members) == 0 {
			return vcenter.Datastore{}, false, "datastore cluster " + quote(name)
		}
		best := members[0]
		for _, ds := range members[1:] {
			if ds.FreeBytes > best.FreeBytes {
				best = ds
			}
		}
		return best, true, "datastore cluster " + quote(name)
	}
	return vcenter.Datastore{}, true, ""
}

// hasStorageKey reports whether a storage target names vSphere storage.
func hasStorageKey(target map[string]string) bool {
	_, ds := target[targetDatastore]
	_, pod := target[targetDatastoreCluster]
	return ds || pod
}

// first returns the first non-empty string.
func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// quote quotes s for a message.
func quote(s string) string { return `"` + s + `"` }
