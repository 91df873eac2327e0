package proxmox

import (
	"context"
	"slices"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

var _ providersdk.OrphanLister = (*session)(nil)

// ListMarked returns the cluster's VMs that carry a machine's tag (TagPrefix + UID), with
// the cluster their tags name (ClusterTagPrefix), read in one call of the guest listing
// (/cluster/resources), whatever the number of VMs. Templates are left out. The tag names no namespace or name, and reading them
// from each VM's description would take a call per VM, so MarkedVM.Machine is unset.
func (s *session) ListMarked(ctx context.Context) ([]providersdk.MarkedVM, error) {
	all, err := s.api.Resources(ctx)
	if err != nil {
		return nil, err
	}
	var out []providersdk.MarkedVM
	for _, r := range all {
		if r.Template {
			continue
		}
		uid := markedUID(r.Tags)
		if uid == "" {
			continue
		}
		out = append(out, providersdk.MarkedVM{
			ProviderID: s.providerID(r.VMID), Name: r.Name, MachineUID: k8stypes.UID(uid), ClusterID: clusterOf(pve.SplitTags(r.Tags)),
			Adopted: slices.Contains(pve.SplitTags(r.Tags), AdoptedTag),
		})
	}
	return out, nil
}

// markedUID is the machine UID in a guest's tags (TagPrefix + UID); "" when none has it.
func markedUID(tags string) string {
	for _, t := range pve.SplitTags(tags) {
		if uid, ok := strings.CutPrefix(t, TagPrefix); ok && uid != "" {
			return uid
		}
	}
	return ""
}
