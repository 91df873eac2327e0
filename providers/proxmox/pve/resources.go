package pve

import (
	"context"
	"slices"
	"time"
)

// Resource is a QEMU guest as the cluster lists it.
type Resource struct {
	// VMID is the guest's VMID.
	VMID int
	// Node is the node the guest is on.
	Node string
	// Name is the guest's name; a VM locked by a clone in flight has none yet.
	Name string
	// Status is running or stopped; a paused VM is running.
	Status string
	// Tags is the guest's tag list, as PVE writes it (SplitTags splits it).
	Tags string
	// Lock is the guest's lock, e.g. clone while a clone makes it; "" when none.
	Lock string
	// Template is true for a template.
	Template bool
	// Pool is the resource pool the guest belongs to; "" for none.
	Pool string
}

// resource is a guest as /cluster/resources?type=vm answers it.
type resource struct {
	VMID     int    `json:"vmid"`
	Node     string `json:"node"`
	Name     string `json:"name"`
	Type     string `json:"type"`
	Status   string `json:"status"`
	Tags     string `json:"tags"`
	Lock     string `json:"lock"`
	Template int    `json:"template"`
	Pool     string `json:"pool"`
}

// Resources lists every QEMU guest of the cluster, templates included, in one call,
// which callers that ask at once share (coalesced).
func (c *Client) Resources(ctx context.Context) ([]Resource, error) {
	return c.resources.do(ctx, c.listResources)
}

// ResourcesSince is Resources, answered by the latest listing that started at after or
// later when there is one: no call is made then, and reused is true.
func (c *Client) ResourcesSince(ctx context.Context, after time.Time) (all []Resource, reused bool, err error) {
	return c.resources.since(ctx, after, c.listResources)
}

func (c *Client) listResources(ctx context.Context) ([]Resource, error) {
	var all []resource
	if err := c.get(ctx, "/cluster/resources", map[string]string{"type": "vm"}, &all); err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(r resource) bool { return r.Type != "" && r.Type != "qemu" })
	out := make([]Resource, 0, len(all))
	for _, r := range all {
		out = append(out, Resource{
			VMID: r.VMID, Node: r.Node, Name: r.Name, Status: r.Status, Tags: r.Tags, Lock: r.Lock, Template: r.Template == 1, Pool: r.Pool,
		})
	}
	return out, nil
}

// Node is a node of the cluster.
type Node struct {
	// Name is the node's name.
	Name string
	// Online is true when the cluster sees the node online.
	Online bool
	// CPUs is the node's logical CPU count, the most a VM on it may have (cores ×
	// sockets); 0 when unknown.
	CPUs int
}

// Nodes lists the cluster's nodes in one call.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
		MaxCPU int    `json:"maxcpu"`
	}
	if err := c.get(ctx, "/cluster/resources", map[string]string{"type": "node"}, &nodes); err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, Node{Name: n.Node, Online: n.Status == "online", CPUs: n.MaxCPU})
	}
	return out, nil
}

// StorageResource is a storage of one node as the cluster lists it.
type StorageResource struct {
	// Node is the node that has the storage.
	Node string
	// Storage is the storage's ID.
	Storage string
	// Available is true when the storage is active on the node.
	Available bool
}

// StorageResources lists every node's storages in one call.
func (c *Client) StorageResources(ctx context.Context) ([]StorageResource, error) {
	var storages []struct {
		Node    string `json:"node"`
		Storage string `json:"storage"`
		Status  string `json:"status"`
	}
	if err := c.get(ctx, "/cluster/resources", map[string]string{"type": "storage"}, &storages); err != nil {
		return nil, err
	}
	out := make([]StorageResource, 0, len(storages))
	for _, st := range storages {
		out = append(out, StorageResource{Node: st.Node, Storage: st.Storage, Available: st.Status == "available"})
	}
	return out, nil
}
