package proxmox

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// templateRef is a template found on the cluster.
type templateRef struct {
	node string
	vmid int
}

// Create clones the machine's template onto its failure domain's node and returns the
// clone task at once; Update shapes the VM once the clone is done. The clone carries the
// machine's UID in its description and its name from the machine. It succeeds without a
// clone when the machine's VM exists, and waits for a clone in flight that may be the
// machine's (one a crashed provider started) rather than clone twice. It reads the
// cluster's listing that the Observe of the same reconcile read, when it is fresh
// (takeListing), else lists the cluster.
func (s *session) Create(ctx context.Context, m *providersdk.Machine, _ providersdk.Observation) (providersdk.CreateResult, error) {
	all, ok := s.takeListing(m.UID)
	if !ok || s.othersCloning(all) {
		// Another process's clone, seen locked in the kept listing, may have ended since
		// and be this machine's VM, which pendingClone would no longer see running: a
		// fresh listing shows it.
		var err error
		if all, err = s.guests(ctx); err != nil {
			return providersdk.CreateResult{}, err
		}
	}
	vm, err := s.findIn(ctx, all, m)
	if err != nil || vm != nil {
		return providersdk.CreateResult{}, err
	}
	opts := &infrav1.ProxmoxOptions{}
	if m.Object != nil {
		if err := m.SpecField("proxmox", opts); err != nil {
			return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachineFailedReason, "%s", err.Error())
		}
	}
	tmpl, err := s.template(m, all)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	if upid, err := s.pendingClone(ctx, all, m, tmpl.vmid); err != nil || upid != "" {
		return providersdk.CreateResult{Task: task(upid, providersdk.OperationClone)}, err
	}
	node := first(opts.Node, m.Spec.FailureDomain)
	if node == "" {
		return providersdk.CreateResult{}, providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"the machine names no failure domain and spec.proxmox.node is empty; set one to the node the VM goes on")
	}
	snippet, err := s.writeUserData(ctx, m, node)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	params := map[string]any{
		"name":        vmName(m.Namespace, m.Name),
		"description": description(m, snippet),
		"full":        1,
	}
	if node != tmpl.node {
		params["target"] = node
	}
	if pool := first(opts.Pool, s.pool); pool != "" {
		params["pool"] = pool
	}
	if opts.CloneMode == "linked" {
		params["full"] = 0
	} else if len(m.Spec.Disks) > 0 && m.Spec.Disks[0].Target[targetStorage] != "" {
		params["storage"] = m.Spec.Disks[0].Target[targetStorage]
	}
	upid, err := s.clone(ctx, tmpl, params)
	if err != nil {
		return providersdk.CreateResult{}, err
	}
	// Where the clone will be once its task ends, so the Observe that then finds it
	// reads it there instead of listing the cluster.
	loc := location{node: node}
	loc.vmid, _ = params["newid"].(int)
	s.remember(m.UID, loc)
	s.cloneStarted(upid, m.UID, loc)
	return providersdk.CreateResult{Task: task(upid, providersdk.OperationClone)}, nil
}

// clone clones the template onto a new VMID.
func (s *session) clone(ctx context.Context, tmpl templateRef, params map[string]any) (string, error) {
	upid, err := s.withNewVMID(ctx, func(vmid int) (string, error) {
		params["newid"] = vmid
		var upid string
		return upid, s.post(ctx, vmPath(tmpl.node, tmpl.vmid, "clone"), params, &upid)
	})
	if err != nil {
		return "", s.refused("clone template "+strconv.Itoa(tmpl.vmid), err)
	}
	return upid, nil
}

// withNewVMID allocates a VMID with /cluster/nextid and starts a task that makes a
// VM with it. PVE reserves the VMID when it answers that request (the new VM's config
// exists at once, locked), but not when it answers nextid: two workers that both ask
// before either takes its VMID are handed the same one, and the loser's request is
// refused ("config file already exists", "VM 101 already exists"). So the driver's
// workers take turns on a cluster, each holding its lock (s.vmids) from nextid until
// its request is answered, and never race each other. Other clients of the cluster
// still may: a request refused so asks again after a short random pause, and when every
// attempt loses, the error is returned and the caller retries later.
func (s *session) withNewVMID(ctx context.Context, start func(vmid int) (string, error)) (string, error) {
	var err error
	for range s.driver.cloneAttempts {
		var upid string
		if upid, err = s.takeVMID(ctx, start); err == nil || !strings.Contains(message(err), "already exists") {
			return upid, err
		}
		// Others are making VMs at the same moment: let them take their VMIDs first.
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Duration(rand.Int64N(int64(50 * time.Millisecond)))):
		}
	}
	return "", err
}

// takeVMID asks /cluster/nextid for a free VMID and starts the task that takes it,
// holding the cluster's VMID lock in between.
func (s *session) takeVMID(ctx context.Context, start func(vmid int) (string, error)) (string, error) {
	select {
	case s.vmids <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-s.vmids }()
	var next string
	if err := s.get(ctx, "/cluster/nextid", nil, &next); err != nil {
		return "", err
	}
	vmid, err := strconv.Atoi(strings.TrimSpace(next))
	if err != nil {
		return "", providersdk.Unreachable(providersdk.Explained("Proxmox VE answered /cluster/nextid with "+strconv.Quote(next), err))
	}
	return start(vmid)
}

// refused turns PVE's refusal of a request into a Permanent error when retrying cannot
// help (a missing node, storage or pool, local storage on another node, a linked
// clone of a VM that is not a template), keeping PVE's message.
func (s *session) refused(what string, err error) error {
	if providersdk.IsClassified(err) {
		return err
	}
	msg := message(err)
	for _, p := range []string{"does not exist", "no such", "can't clone", "not allowed", "not supported", "not available"} {
		if strings.Contains(strings.ToLower(msg), p) {
			return providersdk.Permanent(infrav1.MachinePlacementInvalidReason, "Proxmox VE refused to %s: %s", what, msg)
		}
	}
	return err
}

// template finds the machine's template: its resolved "<node>/<vmid>", or its ref, a
// VMID or a template's name. The node is read from the cluster, as a template may have
// moved.
func (s *session) template(m *providersdk.Machine, all []resource) (templateRef, error) {
	img := m.Spec.Image
	ref := img.Ref
	if _, vmid, ok := strings.Cut(img.ResolvedRef, "/"); ok {
		ref = vmid
	}
	if r, ok := findTemplate(all, ref); ok {
		return templateRef{node: r.Node, vmid: r.VMID}, nil
	}
	return templateRef{}, providersdk.Permanent(infrav1.MachineTemplateNotFoundReason,
		"template %q not found in Proxmox VE cluster %s", first(img.ResolvedRef, img.Ref), s.cluster)
}

// findTemplate finds a template by VMID or, of the templates with the name, the one
// with the lowest VMID, so the answer is stable.
func findTemplate(all []resource, ref string) (resource, bool) {
	vmid, byID := strconv.Atoi(strings.TrimSpace(ref))
	var best *resource
	for i, r := range all {
		if r.Template != 1 || (byID == nil && r.VMID != vmid) || (byID != nil && r.Name != ref) {
			continue
		}
		if best == nil || r.VMID < best.VMID {
			best = &all[i]
		}
	}
	if best == nil {
		return resource{}, false
	}
	return *best, true
}
