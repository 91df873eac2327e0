package proxmox

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// templateRef is a template found on the cluster.
type templateRef struct {
	node string
	vmid int
}

// Create clones the machine's template onto its failure domain's node and returns the
// clone task at once, with where the VM will be (its node and new VMID) as Details, so
// that the Observe after the clone reads the VM there; Update shapes the VM once the
// clone is done. The clone carries the machine's UID in its description and its name
// from the machine. It works from what Observe read: the VM, when it exists (nothing
// to do), else the cluster's listing, in which it finds the template. A clone that may
// be the machine's VM in flight (one a crashed provider started) is Observe's to find,
// and is waited for rather than cloned twice.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, obs providersdk.Observation) (providersdk.CreateResult, error) {
	if obs.Task.InFlight() {
		return providersdk.CreateResult{Task: obs.Task}, nil
	}
	st, err := stateOf(obs, "create")
	if err != nil || st.vm != nil {
		return providersdk.CreateResult{}, err
	}
	if s.hotplugErr != nil {
		// The VM's headroom to grow is set once, as it is made: none is made without it.
		return providersdk.CreateResult{}, s.hotplugErr
	}
	opts := &infrav1.ProxmoxOptions{}
	if err := m.Options("proxmox", opts); err != nil {
		return providersdk.CreateResult{}, err
	}
	tmpl, err := s.template(ctx, m, st.guests)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	node := first(opts.Node, m.Spec.FailureDomain)
	if node == "" {
		return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"the machine names no failure domain and spec.proxmox.node is empty; set one to the node the VM goes on")
	}
	userData, upload, err := s.writeUserData(ctx, m, node)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	if upload != "" {
		// The seed's upload is this call's step: the clone follows once the storage
		// lists the file, and the VM never refers to an ISO that is not there.
		return providersdk.CreateResult{Task: task(upload, providersdk.OperationCreate)}, nil
	}
	clone := pve.CloneOptions{
		Name:        machineVMName(m.Namespace, m.Name),
		Description: description(m, userData),
		Pool:        first(opts.Pool, s.pool),
		Linked:      opts.CloneMode == "linked",
	}
	if node != tmpl.node {
		clone.Target = node
	}
	if !clone.Linked && len(m.Spec.Disks) > 0 {
		clone.Storage = m.Spec.Disks[0].Target[targetStorage]
	}
	s.driver.cloneAsked(m.UID)
	upid, vmid, err := s.clone(ctx, tmpl, clone)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	s.cloneStarted(upid, m.UID, vmid)
	return providersdk.CreateResult{
		Task:    task(upid, providersdk.OperationClone),
		Details: &infrav1.ProxmoxStatus{Node: node, VMID: int32(vmid)},
	}, nil
}

// clone clones the template onto a new VMID, which it returns with the task's UPID.
func (s *session) clone(ctx context.Context, tmpl templateRef, o pve.CloneOptions) (string, int, error) {
	upid, vmid, err := s.withNewVMID(ctx, func(vmid int) (string, error) {
		o.NewID = vmid
		return s.api.Clone(ctx, tmpl.node, tmpl.vmid, o)
	})
	if err != nil {
		return "", 0, pve.Refused("clone template "+strconv.Itoa(tmpl.vmid), err)
	}
	return upid, vmid, nil
}

// withNewVMID takes a VMID from the driver's pool for the cluster (vmidPool) and
// starts a task that makes a VM with it, returning the task's UPID and the VMID. PVE
// refuses the request when the VMID was taken meanwhile by another client of the
// cluster ("config file already exists", "VM 101 already exists"): the worker then
// takes another after a short random pause, and when every attempt loses, the error is
// returned and the caller retries later.
func (s *session) withNewVMID(ctx context.Context, start func(vmid int) (string, error)) (string, int, error) {
	var (
		upid string
		vmid int
		err  error
	)
	for range s.driver.cloneAttempts {
		if vmid, err = s.vmids.take(ctx, s.driver.now(), s.api.NextVMID); err != nil {
			return "", 0, err
		}
		upid, err = start(vmid)
		taken := err != nil && pve.IsVMIDTaken(err)
		s.vmids.done(vmid, taken)
		if !taken {
			return upid, vmid, err
		}
		// Others are making VMs at the same moment: let them take their VMIDs first.
		select {
		case <-ctx.Done():
			return "", 0, ctx.Err()
		case <-time.After(time.Duration(rand.Int64N(int64(50 * time.Millisecond)))): //nolint:gosec // retry jitter, not a secret
		}
	}
	return "", 0, err
}

// template finds the machine's template: its resolved "<node>/<vmid>", or its ref, a
// VMID or a template's name. The node is read from the cluster, as a template may have
// moved. The listing's template flag lags behind the config (see unreported): a VM
// the ref names by VMID that the listing does not show as a template yet, as one just
// imported, is one when its config says so (one call, only then).
func (s *session) template(ctx context.Context, m *providersdk.Machine, all []pve.Resource) (templateRef, error) {
	img := m.Spec.Image
	ref := img.Ref
	if _, vmid, ok := strings.Cut(img.ResolvedRef, "/"); ok {
		ref = vmid
	}
	if r, ok := findTemplate(all, ref); ok {
		return templateRef{node: r.Node, vmid: r.VMID}, nil
	}
	if vmid, err := strconv.Atoi(strings.TrimSpace(ref)); err == nil {
		for _, r := range all {
			if r.VMID != vmid {
				continue
			}
			conf, _, err := s.config(ctx, r.Node, r.VMID)
			if err != nil {
				return templateRef{}, err
			}
			if conf["template"] == "1" {
				return templateRef{node: r.Node, vmid: r.VMID}, nil
			}
		}
	}
	return templateRef{}, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason,
		"template %q not found in Proxmox VE cluster %s", first(img.ResolvedRef, img.Ref), s.cluster)
}

// findTemplate finds a template by VMID or, of the templates with the name, the one
// with the lowest VMID, so the answer is stable.
func findTemplate(all []pve.Resource, ref string) (pve.Resource, bool) {
	vmid, byID := strconv.Atoi(strings.TrimSpace(ref))
	var best *pve.Resource
	for i, r := range all {
		if !r.Template || (byID == nil && r.VMID != vmid) || (byID != nil && r.Name != ref) {
			continue
		}
		if best == nil || r.VMID < best.VMID {
			best = &all[i]
		}
	}
	if best == nil {
		return pve.Resource{}, false
	}
	return *best, true
}

// resolvedRef is a template's resolved reference, "<node>/<vmid>", which machines
// clone.
func resolvedRef(r pve.Resource) string { return r.Node + "/" + strconv.Itoa(r.VMID) }
