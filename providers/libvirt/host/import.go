package host

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// qcow2Magic starts every qcow2 file.
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// DetectFormat names the volume format of an image that starts with head: qcow2 when
// it has qcow2's magic, raw otherwise.
func DetectFormat(head []byte) string {
	if bytes.HasPrefix(head, qcow2Magic) {
		return "qcow2"
	}
	return "raw"
}

// Import streams size bytes of an image in format from r into "<volume>.part", then
// copies that to target and deletes it, so that target only ever exists complete. It
// runs on a connection of its own, so that a long upload neither waits for nor holds up
// the client's other calls, and closed when ctx ends.
func (c *Client) Import(ctx context.Context, target VolumeRef, r io.Reader, size int64, format string) error {
	l, err := c.dial()
	if err != nil {
		return err
	}
	defer c.close(l)
	stop := context.AfterFunc(ctx, func() { c.close(l) })
	defer stop()
	return c.upload(l, target, r, size, format)
}

// upload streams the image into "<volume>.part", then copies that to the volume.
func (c *Client) upload(l *libvirt.Libvirt, target VolumeRef, r io.Reader, size int64, format string) error {
	pool, err := l.StoragePoolLookupByName(target.Pool)
	if err != nil {
		return c.fail("find storage pool "+target.Pool, err)
	}
	part := target.Name + ".part"
	if old, err := l.StorageVolLookupByName(pool, part); err == nil {
		_ = l.StorageVolDelete(old, 0)
	}
	spec := &libvirtxml.StorageVolume{
		Name:     part,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(max(size, 0))},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	x, err := spec.Marshal()
	if err != nil {
		return err
	}
	vol, err := l.StorageVolCreateXML(pool, x, 0)
	if err != nil {
		return c.fail("create volume "+target.Pool+"/"+part, err)
	}
	defer func() { _ = l.StorageVolDelete(vol, 0) }()
	if err := l.StorageVolUpload(vol, r, 0, uint64(max(size, 0)), 0); err != nil {
		return c.fail("upload the image", err)
	}
	// The upload replaced the file; its capacity is now the image's virtual size.
	if x, err = l.StorageVolGetXMLDesc(vol, 0); err != nil {
		return c.fail("read volume "+part, err)
	}
	uploaded := &libvirtxml.StorageVolume{}
	if err := uploaded.Unmarshal(x); err != nil || uploaded.Capacity == nil {
		return fmt.Errorf("failed to read the uploaded volume's size")
	}
	spec.Name, spec.Capacity = target.Name, uploaded.Capacity
	if x, err = spec.Marshal(); err != nil {
		return err
	}
	if _, err := l.StorageVolCreateXMLFrom(pool, x, vol, 0); err != nil {
		return c.fail("copy the image to volume "+target.String(), err)
	}
	return nil
}
