package host

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// VolumeRef is a storage volume by pool and name.
type VolumeRef struct {
	// Pool is the storage pool's name.
	Pool string
	// Name is the volume's name in the pool.
	Name string
}

// String returns "<pool>/<name>".
func (v VolumeRef) String() string { return v.Pool + "/" + v.Name }

// Volume is a storage volume as a lookup read it.
type Volume struct {
	// Pool and Name are where the volume is.
	Pool, Name string
	// Path is the volume's path on the host.
	Path string
	// Format is the volume's format, e.g. qcow2 or raw; "" when the pool has none.
	Format string
	// Capacity is the volume's virtual size in bytes.
	Capacity int64

	ref libvirt.StorageVol
}

// Ref is where the volume is.
func (v *Volume) Ref() VolumeRef { return VolumeRef{Pool: v.Pool, Name: v.Name} }

// LookupVolume finds a volume by "<pool>/<volume>" or absolute path. It fails with a
// NotFoundError (KindPool when the pool is missing, else KindVolume) when there is none,
// and with ErrInvalidRef when ref is neither form.
func (c *Client) LookupVolume(ctx context.Context, ref string) (*Volume, error) {
	if !strings.HasPrefix(ref, "/") {
		pool, name, ok := strings.Cut(ref, "/")
		if !ok || pool == "" || name == "" {
			return nil, fmt.Errorf("volume %q is %w", ref, ErrInvalidRef)
		}
		return c.Volume(ctx, VolumeRef{Pool: pool, Name: name})
	}
	return call(ctx, c, "LookupVolume", "look up volume "+ref, func(l *libvirt.Libvirt) (*Volume, error) {
		vol, err := l.StorageVolLookupByPath(ref)
		if isCode(err, libvirt.ErrNoStorageVol, libvirt.ErrNoStoragePool) {
			return nil, &NotFoundError{Kind: KindVolume, Name: ref}
		}
		if err != nil {
			return nil, err
		}
		return readVolume(l, vol)
	})
}

// Volume finds the volume ref. It fails with a NotFoundError (KindPool when the pool is
// missing, else KindVolume) when there is none.
func (c *Client) Volume(ctx context.Context, ref VolumeRef) (*Volume, error) {
	return call(ctx, c, "LookupVolume", "look up volume "+ref.String(), func(l *libvirt.Libvirt) (*Volume, error) {
		vol, err := findVolume(l, ref)
		if err != nil {
			return nil, err
		}
		return readVolume(l, vol)
	})
}

// findVolume looks a volume up by pool and name, with NotFoundErrors for a missing
// pool or volume.
func findVolume(l *libvirt.Libvirt, ref VolumeRef) (libvirt.StorageVol, error) {
	pool, err := l.StoragePoolLookupByName(ref.Pool)
	if isCode(err, libvirt.ErrNoStoragePool) {
		return libvirt.StorageVol{}, &NotFoundError{Kind: KindPool, Name: ref.Pool}
	}
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	vol, err := l.StorageVolLookupByName(pool, ref.Name)
	if isCode(err, libvirt.ErrNoStorageVol) {
		return vol, &NotFoundError{Kind: KindVolume, Name: ref.String()}
	}
	return vol, err
}

// readVolume reads a volume's path, format and capacity.
func readVolume(l *libvirt.Libvirt, vol libvirt.StorageVol) (*Volume, error) {
	x, err := l.StorageVolGetXMLDesc(vol, 0)
	if isCode(err, libvirt.ErrNoStorageVol) {
		// The pool lists the volume but its file is not there: libvirt is still building
		// it (a copy that StorageVolCreateXMLFrom has not finished, such as an image
		// import's last step), or someone removed the file behind libvirt's back. Either
		// way there is no volume to use yet.
		return nil, &NotFoundError{Kind: KindVolume, Name: vol.Pool + "/" + vol.Name}
	}
	if err != nil {
		return nil, err
	}
	def := &libvirtxml.StorageVolume{}
	if err := def.Unmarshal(x); err != nil {
		return nil, err
	}
	v := &Volume{Pool: vol.Pool, Name: vol.Name, ref: vol}
	if def.Capacity != nil {
		v.Capacity = int64(def.Capacity.Value)
	}
	if def.Target != nil {
		v.Path = def.Target.Path
		if def.Target.Format != nil {
			v.Format = def.Target.Format.Type
		}
	}
	return v, nil
}

// VolumeSpec is a volume to create.
type VolumeSpec struct {
	// Volume is where to create it.
	Volume VolumeRef
	// Format is its format, e.g. qcow2.
	Format string
	// Capacity is its virtual size in bytes.
	Capacity int64
	// Preallocate allocates all of Capacity at once (thick provisioning).
	Preallocate bool
	// Backing is the volume the new one starts as: a qcow2 overlay backed by it in
	// pools of files (dir, fs, netfs), a full copy in the other pools, which hold no
	// overlays. nil for a blank volume.
	Backing *Volume
}

// CreateVolume creates the volume spec describes. It fails with a NotFoundError of
// KindPool when the pool is missing.
func (c *Client) CreateVolume(ctx context.Context, spec VolumeSpec) error {
	return c.do(ctx, "CreateVolume", "create volume "+spec.Volume.String(), func(l *libvirt.Libvirt) error {
		pool, err := l.StoragePoolLookupByName(spec.Volume.Pool)
		if isCode(err, libvirt.ErrNoStoragePool) {
			return &NotFoundError{Kind: KindPool, Name: spec.Volume.Pool}
		}
		if err != nil {
			return err
		}
		vol := &libvirtxml.StorageVolume{
			Name:       spec.Volume.Name,
			Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(max(spec.Capacity, 0))},
			Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
			Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: spec.Format}},
		}
		if spec.Preallocate {
			vol.Allocation.Value = vol.Capacity.Value
		}
		b := spec.Backing
		if b == nil {
			return createVolume(l, pool, vol, nil)
		}
		backingFormat := b.Format
		if backingFormat == "" {
			backingFormat = "raw"
		}
		poolXML, err := l.StoragePoolGetXMLDesc(pool, 0)
		if err != nil {
			return err
		}
		p := &libvirtxml.StoragePool{}
		if err := p.Unmarshal(poolXML); err != nil {
			return err
		}
		switch p.Type {
		case "dir", "fs", "netfs":
			vol.BackingStore = &libvirtxml.StorageVolumeBackingStore{
				Path: b.Path, Format: &libvirtxml.StorageVolumeTargetFormat{Type: backingFormat},
			}
			return createVolume(l, pool, vol, nil)
		}
		// Block-backed pools (logical, disk, iSCSI, RBD…) hold no qcow2 overlays: copy.
		vol.Target.Format.Type = backingFormat
		return createVolume(l, pool, vol, &b.ref)
	})
}

// createVolume creates vol in pool, as a copy of from when from is set.
func createVolume(l *libvirt.Libvirt, pool libvirt.StoragePool, vol *libvirtxml.StorageVolume, from *libvirt.StorageVol) error {
	x, err := vol.Marshal()
	if err != nil {
		return err
	}
	if from != nil {
		_, err = l.StorageVolCreateXMLFrom(pool, x, *from, 0)
	} else {
		_, err = l.StorageVolCreateXML(pool, x, 0)
	}
	return err
}

// ResizeVolume grows the volume ref to capacity bytes.
func (c *Client) ResizeVolume(ctx context.Context, ref VolumeRef, capacity int64) error {
	return c.do(ctx, "ResizeVolume", "grow volume "+ref.String(), func(l *libvirt.Libvirt) error {
		vol, err := findVolume(l, ref)
		if err != nil {
			return err
		}
		return l.StorageVolResize(vol, uint64(max(capacity, 0)), 0)
	})
}

// UploadVolume writes data into the volume ref, creating it (or recreating it with the
// right size) first, through libvirt's upload stream, which reaches remote hosts.
func (c *Client) UploadVolume(ctx context.Context, ref VolumeRef, data []byte, format string) error {
	return c.do(ctx, "UploadVolume", "upload volume "+ref.String(), func(l *libvirt.Libvirt) error {
		pool, err := l.StoragePoolLookupByName(ref.Pool)
		if err != nil {
			return err
		}
		vol, err := l.StorageVolLookupByName(pool, ref.Name)
		switch {
		case err == nil:
			if _, capacity, _, err := l.StorageVolGetInfo(vol); err != nil || capacity != uint64(len(data)) {
				if err := l.StorageVolDelete(vol, 0); err != nil {
					return err
				}
				vol.Name = ""
			}
		case !isCode(err, libvirt.ErrNoStorageVol):
			return err
		}
		if vol.Name == "" {
			x, err := (&libvirtxml.StorageVolume{
				Name:     ref.Name,
				Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(len(data))},
				Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
			}).Marshal()
			if err != nil {
				return err
			}
			if vol, err = l.StorageVolCreateXML(pool, x, 0); err != nil {
				return fmt.Errorf("failed to create volume %s: %w", ref, err)
			}
		}
		return l.StorageVolUpload(vol, bytes.NewReader(data), 0, uint64(len(data)), 0)
	})
}

// ParseVolumeRef reads "<pool>/<name>"; false when ref is not of that form.
func ParseVolumeRef(ref string) (VolumeRef, bool) {
	pool, name, ok := strings.Cut(ref, "/")
	return VolumeRef{Pool: pool, Name: name}, ok && pool != "" && name != ""
}

// DeleteVolumes deletes the volumes refs names, each looked up by pool and name: a
// handful of calls whatever the number of volumes on the host. Volumes or pools
// already gone are no error.
func (c *Client) DeleteVolumes(ctx context.Context, refs []VolumeRef) error {
	return c.do(ctx, "DeleteVolumes", fmt.Sprintf("delete %d volumes", len(refs)), func(l *libvirt.Libvirt) error {
		for _, ref := range refs {
			vol, err := findVolume(l, ref)
			if IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			if err := l.StorageVolDelete(vol, 0); err != nil && !isCode(err, libvirt.ErrNoStorageVol) {
				return err
			}
		}
		return nil
	})
}

// SweepVolumes deletes the volumes named in listed ("<pool>/<name>") and those in any
// active pool whose name starts with prefix. Volumes already gone are no error.
func (c *Client) SweepVolumes(ctx context.Context, prefix string, listed []string) error {
	return c.do(ctx, "DeleteVolumes", "delete the volumes named "+prefix+"*", func(l *libvirt.Libvirt) error {
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return err
		}
		for _, p := range pools {
			vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
			if err != nil {
				return err
			}
			for _, v := range vols {
				if !strings.HasPrefix(v.Name, prefix) && !slices.Contains(listed, p.Name+"/"+v.Name) {
					continue
				}
				if err := l.StorageVolDelete(v, 0); err != nil && !isCode(err, libvirt.ErrNoStorageVol) {
					return err
				}
			}
		}
		return nil
	})
}

// GrowDiskOnline grows the volume ref, a disk of the running domain d, to capacity
// bytes through QEMU (block_resize), which the guest sees at once; growing the file
// under a running QEMU instead would not reach the guest and could corrupt the image.
func (c *Client) GrowDiskOnline(ctx context.Context, d *Domain, ref VolumeRef, capacity int64) error {
	return c.do(ctx, "GrowDiskOnline", "grow disk "+ref.String()+" of running domain "+d.Name, func(l *libvirt.Libvirt) error {
		vol, err := findVolume(l, ref)
		if err != nil {
			return err
		}
		path, err := l.StorageVolGetPath(vol)
		if err != nil {
			return err
		}
		return l.DomainBlockResize(d.ref, path, uint64(max(capacity, 0)), libvirt.DomainBlockResizeBytes)
	})
}
