package proxmox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/redact"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// Operations of an import's PVE tasks: PVE's task types.
const (
	opDownload = "download"
	opCreate   = "qmcreate"
	opTemplate = "qmtemplate"
)

// importState is what a session knows of one image's import between calls; the rest
// is read from PVE on every call.
type importState struct {
	// mu makes an image's import one step at a time.
	mu sync.Mutex
	// file is the plan's file; another file (a changed source) starts afresh.
	file string
	// task is the PVE task the import waits for, polled on the next call.
	task providersdk.Task
	// failedAt and failure are the last failure, reported until providersdk.ImportRetry passed.
	failedAt time.Time
	failure  string
}

// importFor returns the session's record of the image's import of file: a new one
// when there is none or the file changed.
func (s *session) importFor(uid k8stypes.UID, file string) *importState {
	s.importsMu.Lock()
	defer s.importsMu.Unlock()
	st := s.imports[uid]
	if st == nil || st.file != file {
		st = &importState{file: file}
		s.imports[uid] = st
	}
	return st
}

// forgetImport drops the record of a finished import.
func (s *session) forgetImport(uid k8stypes.UID, st *importState) {
	s.importsMu.Lock()
	defer s.importsMu.Unlock()
	if s.imports[uid] == st {
		delete(s.imports, uid)
	}
}

// importImage imports the image as a template named name ("" for a derived name),
// one step a call, and reports how far it is. Every step starts a PVE task and
// returns; none waits for one. Each call reads the import's state from PVE, so a new
// session (after a provider restart) carries on where the last one stopped instead of
// downloading again: the template, else a VM on its way to be one, else the
// downloaded file, else a download running, else a new download. Refusals and failed
// tasks are ImportFailed with PVE's words, tried again after providersdk.ImportRetry.
func (s *session) importImage(ctx context.Context, img *providersdk.Image, name string) (providersdk.ImageResult, error) {
	p, err := newImportPlan(img, name)
	if err != nil {
		return s.failedImport(p, err.Error()), nil
	}
	st := s.importFor(img.UID, p.file)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.driver.now()
	if !st.failedAt.IsZero() {
		if now.Sub(st.failedAt) < providersdk.ImportRetry {
			return s.failedImport(p, st.failure), nil
		}
		st.failedAt, st.failure = time.Time{}, ""
	}
	res, err := s.importStep(ctx, st, p)
	switch {
	case err == nil:
		if res.Ready {
			s.forgetImport(img.UID, st)
		}
		return res, nil
	case providersdk.IsUnreachable(err), providersdk.IsUnauthorized(err), ctx.Err() != nil:
		// PVE's health is the Provider's condition; the import goes on when it is back.
		return providersdk.ImageResult{}, err
	}
	st.task = providersdk.Task{}
	// PVE's words may quote the URL, with its token.
	st.failedAt, st.failure = now, redact.Text(importFailure(err))
	ctrl.LoggerFrom(ctx).Info("Image import failed; trying again later", "VMImage", klog.KRef("", p.image),
		"url", redact.URL(p.url), "retryAfter", providersdk.ImportRetry, "err", st.failure)
	return s.failedImport(p, st.failure), nil
}

// importStep reads where the import stands and takes the next step.
func (s *session) importStep(ctx context.Context, st *importState, p importPlan) (providersdk.ImageResult, error) {
	if st.task.InFlight() {
		state, err := s.pollTask(ctx, st.task)
		if err != nil {
			return providersdk.ImageResult{}, err
		}
		if state == taskRunning {
			return importing(p, st.task.Operation), nil
		}
		st.task = providersdk.Task{}
	}
	all, err := s.api.Resources(ctx)
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	vm, err := s.findImported(ctx, all, p)
	switch {
	case err != nil:
		return providersdk.ImageResult{}, err
	case vm != nil && vm.Template:
		return providersdk.ImageResult{Ready: true, ResolvedRef: resolvedRef(*vm)}, nil
	case vm != nil && vm.Lock != "":
		return importing(p, opTemplate), nil
	case vm != nil:
		// The VM was made, but whoever made it did not get to convert it.
		upid, err := s.api.ConvertToTemplate(ctx, vm.Node, vm.VMID)
		if err != nil {
			return providersdk.ImageResult{}, err
		}
		st.task = task(upid, opTemplate)
		return importing(p, opTemplate), nil
	}
	t, err := s.target(ctx)
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	if have, err := s.hasFile(ctx, t, p); err != nil || have {
		if err == nil {
			err = s.createTemplate(ctx, st, t, p, all)
		}
		return importing(p, opCreate), err
	}
	upid, err := s.runningDownload(ctx, t, p)
	if err == nil && upid == "" {
		upid, err = s.download(ctx, t, p)
	}
	if err != nil {
		return providersdk.ImageResult{}, err
	}
	st.task = task(upid, opDownload)
	return importing(p, opDownload), nil
}

// findImported finds the image's template, or the VM on its way to be one: a guest
// with the plan's name whose description names the image's UID and file. Of several,
// a template before a VM, then the lowest VMID.
func (s *session) findImported(ctx context.Context, all []pve.Resource, p importPlan) (*pve.Resource, error) {
	var found *pve.Resource
	for i, r := range all {
		if r.Name != p.name && !unreported(r) {
			continue
		}
		conf, _, err := s.config(ctx, r.Node, r.VMID)
		if err != nil {
			if r.Name != p.name && pve.IsNodeUnreachable(err) {
				continue
			}
			return nil, err
		}
		desc := conf["description"]
		if descriptionValue(desc, DescriptionImageUIDKey) != string(p.uid) || descriptionValue(desc, descriptionImageFile) != p.file {
			continue
		}
		// The listing's name and template flag lag behind the config.
		all[i].Name, all[i].Template = conf["name"], conf["template"] == "1"
		r = all[i]
		if found == nil || (r.Template && !found.Template) || (r.Template == found.Template && r.VMID < found.VMID) {
			found = &all[i]
		}
	}
	return found, nil
}

// hasFile reports whether the import storage holds the plan's file: a download that
// ended well. PVE downloads to a temporary file and renames it at the end, so a file
// there is whole.
func (s *session) hasFile(ctx context.Context, t importTarget, p importPlan) (bool, error) {
	vols, err := s.api.Volumes(ctx, t.node, t.storage, pve.VolumeFilter{Content: "import"})
	if err != nil {
		return false, err
	}
	return slices.Contains(vols, p.volid(t.storage)), nil
}

// runningDownload finds a download of the plan's file that runs on the node, started
// by a session that is gone; PVE's download task has the file name as its ID.
func (s *session) runningDownload(ctx context.Context, t importTarget, p importPlan) (string, error) {
	tasks, err := s.api.RunningTasks(ctx, t.node, opDownload)
	if err != nil {
		return "", err
	}
	for _, tk := range tasks {
		if tk.ID == p.file {
			return tk.UPID, nil
		}
	}
	return "", nil
}

// download starts PVE's download of the image into the import storage. PVE checks
// the checksum before it keeps the file, and fails the task when it differs. The node
// downloads, so the SDK's dial guard cannot watch the connection: the source is checked
// here first (its host, literal or as resolved here, is no link-local, unspecified or
// multicast address, nor loopback unless the Provider allows it). PVE's download-url
// takes no size or time limit, so maxImportSize and the timeouts do not bound it.
func (s *session) download(ctx context.Context, t importTarget, p importPlan) (string, error) {
	if err := s.importLimits.CheckSource(ctx, p.url); err != nil {
		return "", err
	}
	upid, err := s.api.DownloadURL(ctx, t.node, t.storage, pve.Download{
		URL: p.url, Content: "import", Filename: p.file, Checksum: p.sum, ChecksumAlgorithm: p.algo,
	})
	if err != nil {
		return "", err
	}
	ctrl.LoggerFrom(ctx).Info("Downloading image", "VMImage", klog.KRef("", p.image), "url", redact.URL(p.url),
		"node", t.node, "volume", p.volid(t.storage))
	return upid, nil
}

// createTemplate makes the template's VM from the downloaded file on a new VMID: its
// disk imported from the file (import-from), a cloud-init drive, a virtio NIC on the
// node's first bridge, the guest agent on and a serial console, as PVE's cloud-init
// guide prepares cloud images. The next call converts it to a template. A VM being
// created on the node may be this import's, started by a session that is gone (its
// config holds nothing but lock: create until it is done), so it is waited for first.
func (s *session) createTemplate(ctx context.Context, st *importState, t importTarget, p importPlan, all []pve.Resource) error {
	if slices.ContainsFunc(all, func(r pve.Resource) bool { return r.Node == t.node && r.Lock == "create" }) {
		return nil
	}
	disk, err := s.templateDisk(ctx, t.node)
	if err != nil {
		return err
	}
	bridges, err := s.bridges(ctx, t.node)
	if err != nil {
		return err
	}
	if len(bridges) == 0 {
		return fmt.Errorf("node %s has no bridge for the template's NIC", t.node)
	}
	upid, _, err := s.withNewVMID(ctx, func(vmid int) (string, error) {
		return s.api.CreateVM(ctx, t.node, vmid, map[string]any{
			"name":        p.name,
			"description": p.description(),
			"scsihw":      "virtio-scsi-single",
			"scsi0":       disk + ":0,import-from=" + p.volid(t.storage) + ",iothread=1",
			"ide2":        disk + ":cloudinit",
			"net0":        "virtio,bridge=" + bridges[0],
			"boot":        "order=scsi0",
			"agent":       1,
			"ostype":      "l26",
			"serial0":     "socket",
			"vga":         "serial0",
		})
	})
	if err != nil {
		return err
	}
	st.task = task(upid, opCreate)
	return nil
}

// importing is an import's progress.
func importing(p importPlan, op string) providersdk.ImageResult {
	msg := fmt.Sprintf("downloading %s as %s", redact.URL(p.url), p.file)
	switch op {
	case opCreate:
		msg = fmt.Sprintf("making template %q from %s", p.name, p.file)
	case opTemplate:
		msg = fmt.Sprintf("converting VM %q to a template", p.name)
	}
	return providersdk.ImageResult{InProgress: true, Reason: banlieuev1.ImageImportingReason, Message: msg}
}

// failedImport reports a failed import with PVE's words.
func (s *session) failedImport(p importPlan, failure string) providersdk.ImageResult {
	return providersdk.ImageResult{
		Reason: banlieuev1.ImageImportFailedReason,
		Message: fmt.Sprintf("import of %s into Proxmox VE cluster %s failed: %s (tried again %s after the failure)",
			redact.URL(p.url), s.cluster, failure, providersdk.ImportRetry),
	}
}

// importFailure is what an import step's error says: a failed task's exit status or
// PVE's refusal, without the request.
func importFailure(err error) string {
	var tf *providersdk.TaskFailedError
	if errors.As(err, &tf) {
		return tf.Message
	}
	return pve.Message(err)
}
