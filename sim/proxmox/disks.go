package proxmoxsim

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
)

// newDiskPattern is PVE's NEW_DISK_RE: "[storage:]size-in-GiB" asks for a new disk.
var newDiskPattern = regexp.MustCompile(`^(?:([^/:\s]+):)?(\d+(?:\.\d+)?)$`)

// imageName names a VM's n-th disk as the storage's plugin does: vm-101-disk-0 on a
// block storage, 101/vm-101-disk-0.qcow2 on a file storage; base- for templates.
func imageName(st *storage, prefix string, vmid, n int) string {
	if st.fileBased() {
		return fmt.Sprintf("%d/%s-%d-disk-%d.qcow2", vmid, prefix, vmid, n)
	}
	return fmt.Sprintf("%s-%d-disk-%d", prefix, vmid, n)
}

func cloudinitName(st *storage, vmid int) string {
	if st.fileBased() {
		return fmt.Sprintf("%d/vm-%d-cloudinit.qcow2", vmid, vmid)
	}
	return fmt.Sprintf("vm-%d-cloudinit", vmid)
}

func imageFormat(st *storage) string {
	if st.fileBased() {
		return "qcow2"
	}
	return "raw"
}

// disks allocates volumes for one VM and frees them again if the change that needed
// them fails, as PVE's create_disks does.
type disks struct {
	s    *Simulator
	node string
	vmid int
	made []func()
}

func (d *disks) alloc(st *storage, name string, size uint64) *volume {
	v := &volume{name: name, content: "images", format: imageFormat(st), size: size, vmid: d.vmid}
	d.s.putVolume(d.node, st, v)
	d.made = append(d.made, func() { d.s.removeVolume(d.node, st, name) })
	return v
}

// newImage allocates the VM's next free disk on st.
func (d *disks) newImage(st *storage, size uint64) *volume {
	for n := 0; ; n++ {
		name := imageName(st, "vm", d.vmid, n)
		if !d.s.hasDisk(d.node, st, d.vmid, n) && d.s.volumeOn(d.node, st, imageName(st, "base", d.vmid, n)) == nil {
			return d.alloc(st, name, size)
		}
	}
}

func (d *disks) rollback() {
	for _, undo := range d.made {
		undo()
	}
	d.made = nil
}

// imagesStorage finds a storage the node has that holds VM disks.
func (d *disks) imagesStorage(name, param string) (*storage, error) {
	st, err := d.s.storageOn(d.node, name)
	if err != nil {
		return nil, err
	}
	if !st.has("images") {
		return nil, paramErrorf(param, "storage '%s' does not support vm images", name)
	}
	return st, nil
}

// drive turns a drive as a client writes it into the drive as PVE stores it: new
// disks ("local-lvm:10", "local-lvm:0,import-from=…", "local-lvm:cloudinit") are
// allocated and named, existing volumes must exist, CD-ROMs pass.
func (d *disks) drive(key, value, defaultStorage string) (string, error) {
	p := parseProperty(value, "file")
	sid, volname, _ := strings.Cut(p.first, ":")
	switch {
	case volname == "cloudinit" || p.first == "cloudinit":
		if p.first == "cloudinit" {
			sid = defaultStorage
		}
		st, err := d.imagesStorage(sid, "storage")
		if err != nil {
			return "", err
		}
		d.alloc(st, cloudinitName(st, d.vmid), 4<<20)
		p.first, p.opts["media"] = st.Name+":"+cloudinitName(st, d.vmid), "cdrom"
		delete(p.opts, "format")
	case p.isCDROM():
	case newDiskPattern.MatchString(p.first):
		m := newDiskPattern.FindStringSubmatch(p.first)
		sid = m[1]
		if sid == "" {
			sid = defaultStorage
		}
		if sid == "" {
			return "", failf("no storage ID specified (and no default storage)")
		}
		st, err := d.imagesStorage(sid, "storage")
		if err != nil {
			return "", err
		}
		size := scaleSize(m[2], "G")
		if key == "efidisk0" || key == "tpmstate0" {
			size = 4 << 20
		}
		if src := p.opts["import-from"]; src != "" {
			_, v := d.s.findVolume(d.node, src)
			if v == nil {
				return "", failf("volume '%s' does not exist", src)
			}
			size = virtualSize(v)
		}
		v := d.newImage(st, size)
		p.first, p.opts["size"] = st.Name+":"+v.name, formatSize(size)
		delete(p.opts, "import-from")
		delete(p.opts, "format")
	default:
		_, v := d.s.findVolume(d.node, p.first)
		if v == nil {
			return "", failf("volume '%s' does not exist", p.first)
		}
		p.opts["size"] = formatSize(v.size)
	}
	return p.String(), nil
}

// virtualSize is the disk size an imported image gives: a qcow2 header's size field,
// else the file's length.
func virtualSize(v *volume) uint64 {
	if len(v.data) >= 32 && string(v.data[:4]) == "QFI\xfb" {
		return binary.BigEndian.Uint64(v.data[24:32])
	}
	return v.size
}

// vmVolumes lists the volumes a config refers to, CD-ROM media excepted but
// cloud-init drives included, by volume ID.
func vmVolumes(conf map[string]string) []string {
	var out []string
	for k, v := range conf {
		if !driveKey.MatchString(k) && !strings.HasPrefix(k, "unused") {
			continue
		}
		p := parseProperty(v, "file")
		if p.isCDROM() && !strings.Contains(p.first, "cloudinit") {
			continue
		}
		if strings.Contains(p.first, ":") {
			out = append(out, p.first)
		}
	}
	return out
}

// putResize grows a disk in a resize task; "+2G" adds, "20G" sets.
func (s *Simulator) putResize(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	disk, size := c.params["disk"], c.params["size"]
	if disk == "" {
		return nil, missing("disk")
	}
	m := sizePattern.FindStringSubmatch(size)
	if m == nil {
		return nil, paramErrorf("size", "value does not match the regex pattern")
	}
	if err := v.checkDigest(c); err != nil {
		return nil, err
	}
	if err := v.checkLock(c); err != nil {
		return nil, err
	}
	value, ok := v.conf[disk]
	if !ok || !driveKey.MatchString(disk) {
		return nil, failf("disk '%s' does not exist", disk)
	}
	p := parseProperty(value, "file")
	if p.isCDROM() {
		return nil, failf("you can't resize a cdrom")
	}
	_, vol := s.findVolume(v.node, p.first)
	if vol == nil {
		return nil, failf("Could not determine current size of volume '%s'", p.first)
	}
	newSize := scaleSize(m[2], m[3])
	if m[1] == "+" {
		newSize += vol.size
	}
	if newSize < vol.size {
		return nil, failf("shrinking disks is not supported")
	}
	return s.fork(c, "resize", fmt.Sprint(v.vmid), worker{locks: s.configLock(v.vmid), finish: func(fail error) error {
		if fail == nil {
			fail = s.checkWritable(v)
		}
		if fail != nil {
			return fail
		}
		vol.size = newSize
		if cur := s.vms[v.vmid]; cur == v && v.conf[disk] == value {
			p.opts["size"] = formatSize(newSize)
			v.conf[disk] = p.String()
		}
		return nil
	}}, fmt.Sprintf("update VM %d: resize --disk %s --size %s", v.vmid, disk, size)), nil
}
