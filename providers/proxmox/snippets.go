package proxmox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// snippetName is the file name of a machine's user-data snippet.
func snippetName(m *providersdk.Machine) string { return TagPrefix + string(m.UID) + ".yaml" }

// writeUserData writes the machine's user data as a snippet on node's snippets storage
// and returns its volume ID, "<storage>:snippets/<name>"; "" when the machine has none.
func (s *session) writeUserData(ctx context.Context, m *providersdk.Machine, node string) (string, error) {
	if len(m.UserData) == 0 {
		return "", nil
	}
	if s.driver.snippets == nil {
		return "", providersdk.Permanent(infrav1.MachineFailedReason,
			"the machine has user data, which reaches Proxmox VE guests as a cicustom snippet, and this provider has no way "+
				"to write snippets (PVE's API cannot upload them); run the provider with a snippet writer")
	}
	storage, err := s.snippetStorage(ctx, node)
	if err != nil {
		return "", err
	}
	name := snippetName(m)
	if err := s.driver.snippets.WriteSnippet(ctx, node, storage, name, m.UserData); err != nil {
		return "", fmt.Errorf("failed to write the user-data snippet %s to storage %s on node %s: %w", name, storage, node, err)
	}
	return storage + ":snippets/" + name, nil
}

// snippetStorage is the Provider's snippetsStorage parameter, else the first storage of
// the node that holds snippets.
func (s *session) snippetStorage(ctx context.Context, node string) (string, error) {
	storage, err := s.pickStorage(ctx, node, "snippets", s.snippetsStorage, false)
	if err != nil {
		return "", err
	}
	if storage == "" {
		return "", providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"node %s has no storage for snippets, which user data needs; add 'snippets' to a storage's content, or set the Provider's %s parameter",
			node, ParamSnippetsStorage)
	}
	return storage, nil
}

// deleteSnippet removes the VM's user-data snippet, named in its description, with
// PVE's storage API; a snippet already gone is fine.
func (s *session) deleteSnippet(ctx context.Context, vm *vmState) error {
	volid := descriptionValue(vm.conf["description"], descriptionUserData)
	storage, _, ok := strings.Cut(volid, ":")
	if !ok {
		return nil
	}
	if _, err := s.api.DeleteVolume(ctx, vm.Node, storage, volid); err != nil && !pve.IsNotFound(err) {
		return err
	}
	return nil
}

// DirSnippetWriter writes snippets into root/<storage>/snippets/, for a provider that
// mounts the storages' directories (an NFS or CephFS storage shared with the nodes, say
// at /mnt/pve). Storages it does not mount fail with an error naming the directory.
func DirSnippetWriter(root string) SnippetWriter {
	return SnippetWriterFunc(func(_ context.Context, _, storage, name string, data []byte) error {
		dir := filepath.Join(root, filepath.Base(storage), "snippets")
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("storage %s is not mounted at %s: %w", storage, dir, err)
		}
		tmp, err := os.CreateTemp(dir, "."+name+".*")
		if err != nil {
			return err
		}
		defer func() { _ = os.Remove(tmp.Name()) }()
		if _, err := tmp.Write(data); err != nil {
			_ = tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		// Rename is atomic: a node never reads half a snippet.
		return os.Rename(tmp.Name(), filepath.Join(dir, filepath.Base(name)))
	})
}
