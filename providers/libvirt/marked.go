package libvirt

import (
	"context"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt/host"
)

var _ providersdk.OrphanLister = (*session)(nil)

// ListMarked returns the host's domains, running or not, whose metadata holds
// banlieue's element with a machine UID, and the machine's namespace, name and cluster
// as the element names them.
func (s *session) ListMarked(ctx context.Context) ([]providersdk.MarkedVM, error) {
	h, err := s.hostInfo(ctx)
	if err != nil {
		return nil, err
	}
	doms, err := s.host.MarkedDomains(ctx)
	if err != nil {
		return nil, err
	}
	var out []providersdk.MarkedVM
	for _, d := range doms {
		if !marked(d.Metadata) {
			continue
		}
		// A domain banlieue defines gets the machine's UID as its UUID; an adopted one
		// keeps its own.
		vm := providersdk.MarkedVM{ProviderID: providerID(h, d.UUID), Name: d.Name, MachineUID: k8stypes.UID(d.Metadata.UID), ClusterID: d.Metadata.Cluster,
			Adopted: !strings.EqualFold(d.UUID, d.Metadata.UID)}
		if d.Metadata.Name != "" {
			vm.Machine = k8stypes.NamespacedName{Namespace: d.Metadata.Namespace, Name: d.Metadata.Name}
		}
		out = append(out, vm)
	}
	return out, nil
}

// marked reports whether banlieue's metadata element of a domain names a machine: the
// mark ListMarked lists domains by and ListVMs leaves them out by.
func marked(md *host.Metadata) bool { return md != nil && md.UID != "" }
