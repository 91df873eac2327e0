package pve

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
)

// Storage is a storage of a node.
type Storage struct {
	// Name is the storage's ID.
	Name string
	// Shared is true for a storage every node reaches (NFS, Ceph, …).
	Shared bool
}

// Storages lists a node's enabled storages for content (images, snippets, import,
// iso, …), in PVE's order.
func (c *Client) Storages(ctx context.Context, node, content string) ([]Storage, error) {
	var storages []struct {
		Storage string `json:"storage"`
		Shared  int    `json:"shared"`
	}
	if err := c.get(ctx, "/nodes/"+node+"/storage", map[string]string{"content": content, "enabled": "1"}, &storages); err != nil {
		return nil, err
	}
	out := make([]Storage, 0, len(storages))
	for _, st := range storages {
		out = append(out, Storage{Name: st.Storage, Shared: st.Shared == 1})
	}
	return out, nil
}

// VolumeFilter narrows a storage's content listing; the zero filter lists every
// volume.
type VolumeFilter struct {
	// Content is the content type, e.g. import; "" for any.
	Content string
	// VMID is the VM whose volumes to list; 0 for any.
	VMID int
}

// Volumes lists the volume IDs a node's storage holds.
func (c *Client) Volumes(ctx context.Context, node, storage string, f VolumeFilter) ([]string, error) {
	q := map[string]string{}
	if f.Content != "" {
		q["content"] = f.Content
	}
	if f.VMID != 0 {
		q["vmid"] = strconv.Itoa(f.VMID)
	}
	var vols []struct {
		VolID string `json:"volid"`
	}
	if err := c.get(ctx, "/nodes/"+node+"/storage/"+storage+"/content", q, &vols); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(vols))
	for _, v := range vols {
		out = append(out, v.VolID)
	}
	return out, nil
}

// DeleteVolume deletes a volume of a node's storage and returns the task's UPID.
func (c *Client) DeleteVolume(ctx context.Context, node, storage, volid string) (string, error) {
	var upid string
	err := c.del(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, volid), nil, &upid)
	return upid, err
}

// Upload is a file to upload into a node's storage.
type Upload struct {
	// Content is the content type the file is for: iso, vztmpl or import (PVE uploads
	// no other).
	Content string
	// Filename is the file's name in the storage.
	Filename string
	// Data is the file.
	Data []byte
}

// Upload sends a file to a node's storage in one multipart request and returns the
// UPID of the task (imgcopy) that moves it into the storage: the storage lists the
// file once the task has ended. It goes through go-proxmox's UploadReader, which
// writes the form as pveproxy parses it, over the client's transport (so it is
// counted), but takes no context: the response timeout bounds it.
func (c *Client) Upload(ctx context.Context, node, storage string, u Upload) (string, error) {
	path := "/nodes/" + node + "/storage/" + storage + "/upload"
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var upid string
	err := c.api.UploadReader(path, map[string]string{"content": u.Content}, u.Filename, bytes.NewReader(u.Data), int64(len(u.Data)), &upid)
	return upid, c.fail("POST "+path, err)
}

// Download is a file for a node's storage to download.
type Download struct {
	// URL is where the file is.
	URL string
	// Content is the content type the file is for, e.g. import.
	Content string
	// Filename is the file's name in the storage.
	Filename string
	// Checksum and ChecksumAlgorithm (sha256, sha512), when set, are verified before
	// the file is kept: the task fails when they differ.
	Checksum, ChecksumAlgorithm string
}

// DownloadURL has a node download a file into its storage and returns the task's
// UPID, whose ID is the file name.
func (c *Client) DownloadURL(ctx context.Context, node, storage string, d Download) (string, error) {
	params := map[string]any{"url": d.URL, "content": d.Content, "filename": d.Filename}
	if d.ChecksumAlgorithm != "" {
		params["checksum"], params["checksum-algorithm"] = d.Checksum, d.ChecksumAlgorithm
	}
	var upid string
	err := c.post(ctx, "/nodes/"+node+"/storage/"+storage+"/download-url", params, &upid)
	return upid, err
}

// Bridges lists a node's Linux and OVS bridges by name, in PVE's order.
func (c *Client) Bridges(ctx context.Context, node string) ([]string, error) {
	var ifaces []struct {
		Iface string `json:"iface"`
	}
	if err := c.get(ctx, "/nodes/"+node+"/network", map[string]string{"type": "any_bridge"}, &ifaces); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ifaces))
	for _, i := range ifaces {
		names = append(names, i.Iface)
	}
	return names, nil
}
