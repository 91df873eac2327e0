package proxmox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/nocloud"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
)

// writeUserData puts the machine's user data where its VM will read it and returns
// the volume ID to name in the VM's description: a NoCloud seed ISO in an iso storage
// of node (see writeSeed), or, with a SnippetWriter, a cicustom snippet. It returns
// "" for a machine without user data, and the UPID of the seed's upload when it
// started one: the clone waits for that task.
func (s *session) writeUserData(ctx context.Context, m *providersdk.Machine, node string) (volid, upload string, err error) {
	if len(m.UserData) == 0 {
		return "", "", nil
	}
	if s.driver.snippets == nil {
		return s.writeSeed(ctx, m, node)
	}
	volid, err = s.writeSnippet(ctx, m, node)
	return volid, "", err
}

// seedName is the file name of a machine's seed ISO: banlieue-<uid>-<first 8 hex
// digits of the seed's digest>.iso, so a changed seed is a new file and an unchanged
// one is found again.
func seedName(uid k8stypes.UID, seed nocloud.Seed) string {
	return seedPrefix(uid) + seed.Digest()[:8] + ".iso"
}

// seedPrefix starts the file names of the machine's seed ISOs.
func seedPrefix(uid k8stypes.UID) string { return TagPrefix + string(uid) + "-" }

// isSeedOf reports whether a volume ID names one of the machine's seed ISOs.
func isSeedOf(volid string, uid k8stypes.UID) bool {
	_, name, ok := strings.Cut(volid, ":")
	return ok && strings.HasPrefix(name, "iso/"+seedPrefix(uid)) && strings.HasSuffix(name, ".iso")
}

// writeSeed makes sure the machine's seed ISO is in an iso storage of node (see
// isoStorage) and returns its volume ID. It lists the storage's ISOs: the file is
// there when a call before uploaded it (a provider that crashed meanwhile included),
// and is then used as it is; else it is uploaded, and the upload's UPID returned. The
// machine's other seeds there (from a create interrupted before a change of its user
// data) are removed, as no VM uses them.
func (s *session) writeSeed(ctx context.Context, m *providersdk.Machine, node string) (volid, upload string, err error) {
	storage, err := s.isoStorageOf(ctx, node)
	if err != nil {
		return "", "", err
	}
	seed, err := nocloud.MachineSeed(m)
	if err != nil {
		return "", "", err
	}
	name := seedName(m.UID, seed)
	volid = storage + ":iso/" + name
	vols, err := s.api.Volumes(ctx, node, storage, pve.VolumeFilter{Content: "iso"})
	if err != nil {
		return "", "", pve.Refused("list the ISO images of storage "+storage+" on node "+node, err)
	}
	for _, v := range vols {
		if v != volid && isSeedOf(v, m.UID) {
			if err := s.deleteVolume(ctx, node, v); err != nil {
				return "", "", err
			}
		}
	}
	if slices.Contains(vols, volid) {
		return volid, "", nil
	}
	iso, err := seed.BuildISO()
	if err != nil {
		return "", "", err
	}
	upload, err = s.api.Upload(ctx, node, storage, pve.Upload{Content: "iso", Filename: name, Data: iso})
	if err != nil {
		return "", "", pve.Refused("upload the NoCloud seed "+name+" to storage "+storage+" on node "+node, err)
	}
	return volid, upload, nil
}

// isoStorageOf is the Provider's isoStorage parameter, which must hold ISO images on
// the node, else the node's first storage for ISO images, a shared one first (the
// seed then does not keep the VM on its node).
func (s *session) isoStorageOf(ctx context.Context, node string) (string, error) {
	if s.isoStorage != "" {
		storages, err := s.api.Storages(ctx, node, "iso")
		if err != nil {
			return "", pve.Refused("list the storages of node "+node, err)
		}
		if !slices.ContainsFunc(storages, func(st pve.Storage) bool { return st.Name == s.isoStorage }) {
			return "", providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
				"storage %s, the Provider's %s parameter, holds no ISO images on node %s, which the machine's user data needs; "+
					"add 'iso' to its content and make it available on the node, or name another storage", s.isoStorage, ParamISOStorage, node)
		}
		return s.isoStorage, nil
	}
	storage, err := s.pickStorage(ctx, node, "iso", "", true)
	if err != nil {
		return "", err
	}
	if storage == "" {
		return "", providersdk.Permanent(infrav1.MachinePlacementInvalidReason,
			"node %s has no storage for ISO images, which the machine's user data needs (it reaches the guest as a NoCloud seed ISO); "+
				"add 'iso' to a storage's content, or set the Provider's %s parameter", node, ParamISOStorage)
	}
	return storage, nil
}

// deleteSeeds removes the machine's seed ISOs from the iso storages of the node its VM
// was on (or was to be on), found by their names in the storages' listings, once the
// VM is gone; a machine without spec.userData has none. It returns the UPID of the
// last removal started, "" when there was nothing to remove.
func (s *session) deleteSeeds(ctx context.Context, m *providersdk.Machine) (string, error) {
	if m.Spec.UserData == nil {
		return "", nil
	}
	opts := &infrav1.ProxmoxOptions{}
	if err := m.Options("proxmox", opts); err != nil {
		return "", err
	}
	node := first(recordedLocation(m).node, opts.Node, m.Spec.FailureDomain)
	if node == "" {
		return "", nil
	}
	storages, err := s.api.Storages(ctx, node, "iso")
	if err != nil {
		if pve.IsNotFound(err) {
			return "", nil // the node left the cluster, and its storages with it
		}
		return "", err
	}
	var last string
	for _, st := range storages {
		vols, err := s.api.Volumes(ctx, node, st.Name, pve.VolumeFilter{Content: "iso"})
		if err != nil {
			return "", err
		}
		for _, v := range vols {
			if !isSeedOf(v, m.UID) {
				continue
			}
			upid, err := s.api.DeleteVolume(ctx, node, st.Name, v)
			switch {
			case pve.IsNotFound(err):
			case err != nil:
				return "", err
			default:
				last = upid
			}
		}
	}
	return last, nil
}

// deleteVolume removes a volume of a node's storage; one already gone is fine.
func (s *session) deleteVolume(ctx context.Context, node, volid string) error {
	storage, _, _ := strings.Cut(volid, ":")
	if _, err := s.api.DeleteVolume(ctx, node, storage, volid); err != nil && !pve.IsNotFound(err) {
		return err
	}
	return nil
}

// userDataChanges makes the VM read the user data its description names: a snippet
// through cicustom, a seed ISO as a CD-ROM (see seedDrive).
func userDataChanges(m *providersdk.Machine, conf pve.Config, c *changeSet) {
	volid := descriptionValue(conf["description"], descriptionUserData)
	switch {
	case isSeedOf(volid, m.UID):
		if key := seedDrive(conf, volid); pve.ParseProperty(conf[key]).First != volid {
			c.set[key] = volid + ",media=cdrom"
		}
	case volid != "" && conf["cicustom"] != "user="+volid:
		c.set["cicustom"] = "user=" + volid
	}
}

// seedDrive is the drive that holds the seed ISO: the one that holds it already, else
// the template's cloud-init drive, which the seed replaces (the guest must see one
// NoCloud source, and PVE frees the cloud-init volume), else the first free IDE slot
// (ide2 is PVE's usual CD-ROM), then SATA slot.
func seedDrive(conf pve.Config, volid string) string {
	var cloudinit string
	for _, k := range driveKeys() {
		p := pve.ParseProperty(conf[k])
		switch {
		case p.First == volid:
			return k
		case cloudinit == "" && strings.Contains(p.First, "cloudinit"):
			cloudinit = k
		}
	}
	if cloudinit != "" {
		return cloudinit
	}
	for _, k := range []string{"ide2", "ide0", "ide1", "ide3", "sata0", "sata1", "sata2", "sata3", "sata4"} {
		if _, used := conf[k]; !used {
			return k
		}
	}
	return "sata5"
}

// driveKeys are the config keys a drive may have, in PVE's bus order.
func driveKeys() []string {
	var out []string
	for bus, n := range map[string]int{"ide": 4, "sata": 6, "scsi": 31, "virtio": 16} {
		for i := range n {
			out = append(out, bus+strconv.Itoa(i))
		}
	}
	slices.Sort(out)
	return out
}

// snippetName is the file name of a machine's user-data snippet.
func snippetName(m *providersdk.Machine) string { return TagPrefix + string(m.UID) + ".yaml" }

// writeSnippet writes the machine's user data as a snippet on node's snippets storage
// with the driver's SnippetWriter and returns its volume ID, "<storage>:snippets/<name>".
func (s *session) writeSnippet(ctx context.Context, m *providersdk.Machine, node string) (string, error) {
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
// PVE's storage API; a snippet already gone is fine. A seed ISO is removed once the VM
// is gone (deleteSeeds).
func (s *session) deleteSnippet(ctx context.Context, vm *vmState) error {
	volid := descriptionValue(vm.conf["description"], descriptionUserData)
	if !strings.Contains(volid, ":snippets/") {
		return nil
	}
	return s.deleteVolume(ctx, vm.Node, volid)
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
