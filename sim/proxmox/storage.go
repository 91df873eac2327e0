package proxmoxsim

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
)

// Storage describes one storage of the cluster, as storage.cfg does.
type Storage struct {
	// Name is the storage ID, e.g. local-lvm.
	Name string
	// Type is the PVE storage plugin: dir, nfs, cifs or cephfs (file based, disks as
	// qcow2 files), lvmthin, zfspool or rbd (block based, linked clones) or lvm (block
	// based, no linked clones).
	Type string
	// Content lists what it holds: images, rootdir, iso, vztmpl, snippets, import,
	// backup.
	Content []string
	// Shared storages have one set of volumes seen by every node; the others have a
	// set per node.
	Shared bool
	// Nodes restricts the storage to these nodes; every node when empty.
	Nodes []string
	// Path is where a file based storage keeps its files; /var/lib/vz for local and
	// /mnt/pve/<name> for the others when empty.
	Path string
	// Size is its capacity in bytes; 500 GiB when zero.
	Size uint64
}

// DefaultStorages are a fresh PVE install's storages, with snippets enabled on local
// so that cicustom works: local (dir) and local-lvm (LVM-thin).
func DefaultStorages() []Storage {
	return []Storage{
		{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "backup", "snippets", "import"}},
		{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
	}
}

type storage struct{ Storage }

func (st *storage) has(content string) bool { return slices.Contains(st.Content, content) }

func (st *storage) availableOn(node string) bool {
	return len(st.Nodes) == 0 || slices.Contains(st.Nodes, node)
}

func (st *storage) contentString() string {
	return strings.Join(slices.Sorted(slices.Values(st.Content)), ",")
}

func (st *storage) size() uint64 { return cmp.Or(st.Size, 500<<30) }

func (st *storage) fileBased() bool {
	return slices.Contains([]string{"dir", "nfs", "cifs", "cephfs", "glusterfs", "btrfs"}, st.Type)
}

func (st *storage) path() string {
	if st.Path != "" || !st.fileBased() {
		return st.Path
	}
	if st.Name == "local" {
		return "/var/lib/vz"
	}
	return "/mnt/pve/" + st.Name
}

// volume is one volume of a storage: a disk image or a file.
type volume struct {
	// name is the volume name, the part of the volume ID after "storage:".
	name    string
	content string
	format  string
	size    uint64
	vmid    int
	// parent is the base volume a linked clone's disk refers to.
	parent string
	data   []byte
	ctime  int64
}

func (s *Simulator) storage(name string) *storage {
	for _, st := range s.storages {
		if st.Name == name {
			return st
		}
	}
	return nil
}

// storeKey names the set of volumes a node sees on a storage: one for a shared
// storage, one per node otherwise.
func storeKey(node string, st *storage) string {
	if st.Shared {
		return st.Name
	}
	return node + "/" + st.Name
}

func (s *Simulator) putVolume(node string, st *storage, v *volume) {
	key := storeKey(node, st)
	if s.volumes[key] == nil {
		s.volumes[key] = map[string]*volume{}
		s.images[key] = map[string]int{}
	}
	if v.ctime == 0 {
		v.ctime = time.Now().Unix()
	}
	if old := s.volumes[key][v.name]; old == nil {
		s.images[key][path.Base(v.name)]++
	}
	s.volumes[key][v.name] = v
}

func (s *Simulator) volumeOn(node string, st *storage, name string) *volume {
	return s.volumes[storeKey(node, st)][name]
}

func (s *Simulator) removeVolume(node string, st *storage, name string) {
	key := storeKey(node, st)
	if _, ok := s.volumes[key][name]; !ok {
		return
	}
	delete(s.volumes[key], name)
	// A linked clone's disk, base-9000-disk-0/vm-101-disk-0, counts as vm-101-disk-0.
	image := path.Base(name)
	if s.images[key][image]--; s.images[key][image] == 0 {
		delete(s.images[key], image)
	}
}

// findVolume resolves a volume ID (storage:name) on a node.
func (s *Simulator) findVolume(node, volid string) (*storage, *volume) {
	sid, name, ok := strings.Cut(volid, ":")
	st := s.storage(sid)
	if !ok || st == nil || !st.availableOn(node) {
		return nil, nil
	}
	return st, s.volumeOn(node, st, name)
}

func (s *Simulator) storageUsed(node string, st *storage) uint64 {
	var used uint64
	for _, v := range s.volumes[storeKey(node, st)] {
		used += v.size
	}
	return used
}

// storageOn finds the storage a request names and checks the node can use it.
func (s *Simulator) storageOn(node, name string) (*storage, error) {
	st := s.storage(name)
	if st == nil {
		return nil, failf("storage '%s' does not exist", name)
	}
	if !st.availableOn(node) {
		return nil, failf("storage '%s' is not available on node '%s'", name, node)
	}
	return st, nil
}

func (st *storage) config() map[string]any {
	r := map[string]any{"storage": st.Name, "type": st.Type, "content": st.contentString(), "digest": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"}
	if st.Shared {
		r["shared"] = 1
	}
	if p := st.path(); p != "" {
		r["path"] = p
	}
	if st.Type == "lvmthin" {
		r["vgname"], r["thinpool"] = "pve", "data"
	}
	if len(st.Nodes) > 0 {
		r["nodes"] = strings.Join(st.Nodes, ",")
	}
	return r
}

func (s *Simulator) getStorageConfigs(*call) (any, error) {
	out := make([]map[string]any, 0, len(s.storages))
	for _, st := range s.storages {
		out = append(out, st.config())
	}
	return out, nil
}

func (s *Simulator) getStorageConfig(c *call) (any, error) {
	st := s.storage(c.params["storage"])
	if st == nil {
		return nil, failf("storage '%s' does not exist", c.params["storage"])
	}
	return st.config(), nil
}

func (s *Simulator) storageStatus(node string, st *storage) map[string]any {
	used := s.storageUsed(node, st)
	return map[string]any{
		"storage": st.Name, "type": st.Type, "content": st.contentString(), "shared": boolInt(st.Shared),
		"active": 1, "enabled": 1, "total": st.size(), "used": used, "avail": st.size() - min(used, st.size()),
		"used_fraction": float64(used) / float64(st.size()),
	}
}

// getNodeStorages lists the storages a node can use; ?content and ?storage filter.
func (s *Simulator) getNodeStorages(c *call) (any, error) {
	out := []map[string]any{}
	for _, st := range s.storages {
		if !st.availableOn(c.node) || (c.params["storage"] != "" && st.Name != c.params["storage"]) {
			continue
		}
		if want := c.params["content"]; want != "" && !slices.ContainsFunc(strings.Split(want, ","), st.has) {
			continue
		}
		out = append(out, s.storageStatus(c.node, st))
	}
	return out, nil
}

func (s *Simulator) getStorageStatus(c *call) (any, error) {
	st := s.storage(c.params["storage"])
	if st == nil || !st.availableOn(c.node) {
		return nil, paramErrorf("storage", "No such storage.")
	}
	r := s.storageStatus(c.node, st)
	delete(r, "storage")
	return r, nil
}

// getStorageContent lists a storage's volumes on a node; ?content and ?vmid filter.
func (s *Simulator) getStorageContent(c *call) (any, error) {
	st, err := s.storageOn(c.node, c.params["storage"])
	if err != nil {
		return nil, err
	}
	vols := s.volumes[storeKey(c.node, st)]
	out := []map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(vols)) {
		v := vols[name]
		if (c.params["content"] != "" && v.content != c.params["content"]) || (c.params["vmid"] != "" && fmt.Sprint(v.vmid) != c.params["vmid"]) {
			continue
		}
		r := map[string]any{"volid": st.Name + ":" + v.name, "content": v.content, "format": v.format, "size": v.size, "ctime": v.ctime}
		if v.vmid != 0 {
			r["vmid"] = v.vmid
		}
		if v.parent != "" {
			r["parent"] = v.parent
		}
		if v.content == "images" || v.content == "rootdir" {
			r["used"] = v.size / 10
		}
		out = append(out, r)
	}
	return out, nil
}

// volumeParam resolves {volume}, which is a volume ID or, without a colon, a volume
// name on the path's storage.
func (s *Simulator) volumeParam(c *call) (*storage, *volume, error) {
	st, err := s.storageOn(c.node, c.params["storage"])
	if err != nil {
		return nil, nil, err
	}
	volid := c.params["volume"]
	if !strings.Contains(volid, ":") {
		volid = st.Name + ":" + volid
	}
	vst, v := s.findVolume(c.node, volid)
	if v == nil {
		return nil, nil, failf("volume '%s' does not exist", volid)
	}
	return vst, v, nil
}

func (s *Simulator) getVolumeAttributes(c *call) (any, error) {
	st, v, err := s.volumeParam(c)
	if err != nil {
		return nil, err
	}
	r := map[string]any{"size": v.size, "used": v.size, "format": v.format, "protected": 0}
	if p := st.path(); p != "" {
		r["path"] = p + "/" + contentDir(v)
	} else {
		r["path"] = "/dev/pve/" + v.name
	}
	return r, nil
}

// contentDir is where a file based storage keeps a volume, relative to its path.
func contentDir(v *volume) string {
	switch v.content {
	case "iso", "vztmpl":
		return "template/" + v.name
	case "images":
		return "images/" + v.name
	}
	return v.name
}

// deleteVolume removes a volume in an imgdel task, as PVE 8 does.
func (s *Simulator) deleteVolume(c *call) (any, error) {
	st, v, err := s.volumeParam(c)
	if err != nil {
		return nil, err
	}
	node := c.node
	return s.startTask(c, "imgdel", "", func(fail error) error {
		if fail != nil {
			return fail
		}
		s.removeVolume(node, st, v.name)
		return nil
	}), nil
}

// StoredVolume is a volume as a node sees it: Node is "" for a shared storage's, which
// every node sees.
type StoredVolume struct {
	Node  string
	VolID string
}

// Volumes lists the volumes of a content type (iso, images, snippets, …) on every
// storage, ordered by node and volume ID, for tests that look for leftovers.
func (s *Simulator) Volumes(content string) []StoredVolume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StoredVolume
	for key, vols := range s.volumes {
		node, sid, ok := strings.Cut(key, "/")
		if !ok {
			node, sid = "", key
		}
		for _, v := range vols {
			if v.content == content {
				out = append(out, StoredVolume{Node: node, VolID: sid + ":" + v.name})
			}
		}
	}
	slices.SortFunc(out, func(a, b StoredVolume) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.VolID, b.VolID))
	})
	return out
}
