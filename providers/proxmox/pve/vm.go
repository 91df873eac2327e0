package pve

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// vmPath is the API path of a VM, with more path segments appended.
func vmPath(node string, vmid int, more ...string) string {
	p := fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid)
	for _, m := range more {
		p += "/" + m
	}
	return p
}

// NextVMID asks /cluster/nextid for a free VMID. PVE reserves nothing when it
// answers: the VMID is taken by the request that makes a VM with it.
func (c *Client) NextVMID(ctx context.Context) (int, error) {
	var next string
	if err := c.get(ctx, "/cluster/nextid", nil, &next); err != nil {
		return 0, err
	}
	vmid, err := strconv.Atoi(strings.TrimSpace(next))
	if err != nil {
		return 0, providersdk.Unreachable(providersdk.Explained("Proxmox VE answered /cluster/nextid with "+strconv.Quote(next), err))
	}
	return vmid, nil
}

// Pending is what a VM's config holds for its next power cycle: the changes PVE
// could not make to the running VM (cores, a machine type, a hotplug it refused),
// which it makes at the VM's next start or stop.
type Pending struct {
	// Set are the pending values, by key.
	Set map[string]string
	// Delete are the keys pending deletion.
	Delete []string
}

// Empty reports whether nothing is pending.
func (p Pending) Empty() bool { return len(p.Set) == 0 && len(p.Delete) == 0 }

// Apply is conf with the pending changes made, as PVE's GET config answers by
// default and as the VM will be after its next power cycle.
func (p Pending) Apply(conf Config) Config {
	out := maps.Clone(conf)
	maps.Copy(out, p.Set)
	for _, k := range p.Delete {
		delete(out, k)
	}
	return out
}

// VMConfig reads a VM's config, in one call of GET pending: the values the VM runs
// with (with the config's digest), and what is pending for its next power cycle.
// IsNotFound when the VM is not on the node.
func (c *Client) VMConfig(ctx context.Context, node string, vmid int) (Config, Pending, error) {
	var items []struct {
		Key     string `json:"key"`
		Value   any    `json:"value"`
		Pending any    `json:"pending"`
		Delete  int    `json:"delete"`
	}
	if err := c.get(ctx, vmPath(node, vmid, "pending"), nil, &items); err != nil {
		return nil, Pending{}, err
	}
	conf, pending := Config{}, Pending{}
	for _, it := range items {
		if v, ok := configValue(it.Value); ok {
			conf[it.Key] = v
		}
		if v, ok := configValue(it.Pending); ok {
			if pending.Set == nil {
				pending.Set = map[string]string{}
			}
			pending.Set[it.Key] = v
		}
		if it.Delete != 0 {
			pending.Delete = append(pending.Delete, it.Key)
		}
	}
	return conf, pending, nil
}

// ConfigChange is one update of a VM's config.
type ConfigChange struct {
	// Set are the keys to set, with their values.
	Set map[string]any
	// Delete are the keys to remove.
	Delete []string
	// Revert are the keys whose pending change to drop.
	Revert []string
	// Digest is the digest of the config the change was computed from: PVE refuses
	// the change when the config changed since.
	Digest string
}

// SetConfig updates a VM's config synchronously, in one request. On a running VM, PVE
// applies what it can hotplug and keeps the rest pending; a value it failed to hotplug
// stays pending too, and the call fails (HotplugProblems names them).
func (c *Client) SetConfig(ctx context.Context, node string, vmid int, ch ConfigChange) error {
	params := maps.Clone(ch.Set)
	if params == nil {
		params = map[string]any{}
	}
	if len(ch.Delete) > 0 {
		params["delete"] = strings.Join(ch.Delete, ",")
	}
	if len(ch.Revert) > 0 {
		params["revert"] = strings.Join(ch.Revert, ",")
	}
	if ch.Digest != "" {
		params["digest"] = ch.Digest
	}
	return c.put(ctx, vmPath(node, vmid, "config"), params, nil)
}

// Resize grows a VM's disk to sizeGiB and returns the task's UPID.
func (c *Client) Resize(ctx context.Context, node string, vmid int, disk string, sizeGiB int64) (string, error) {
	var upid string
	err := c.put(ctx, vmPath(node, vmid, "resize"), map[string]any{"disk": disk, "size": strconv.FormatInt(sizeGiB, 10) + "G"}, &upid)
	return upid, err
}

// CloneOptions are the clone of a VM or template.
type CloneOptions struct {
	// NewID is the new VM's VMID.
	NewID int
	// Name and Description are the new VM's; the clone writes them with its config.
	Name, Description string
	// Target is the node the clone goes to; "" keeps it on the source's node.
	Target string
	// Pool is the resource pool the clone joins; "" for none.
	Pool string
	// Linked makes a linked clone of a template instead of a full copy.
	Linked bool
	// Storage is where a full clone's disks go; "" keeps the source's storage.
	Storage string
}

// Clone clones the VM (or template) vmid on node and returns the task's UPID. The new
// VM's config exists, locked by the clone, once PVE answers.
func (c *Client) Clone(ctx context.Context, node string, vmid int, o CloneOptions) (string, error) {
	params := map[string]any{"newid": o.NewID, "name": o.Name, "description": o.Description, "full": 1}
	if o.Target != "" {
		params["target"] = o.Target
	}
	if o.Pool != "" {
		params["pool"] = o.Pool
	}
	switch {
	case o.Linked:
		params["full"] = 0
	case o.Storage != "":
		params["storage"] = o.Storage
	}
	var upid string
	err := c.post(ctx, vmPath(node, vmid, "clone"), params, &upid)
	return upid, err
}

// CreateVM makes a VM with the given config keys on node and returns the task's UPID.
func (c *Client) CreateVM(ctx context.Context, node string, vmid int, conf map[string]any) (string, error) {
	params := maps.Clone(conf)
	if params == nil {
		params = map[string]any{}
	}
	params["vmid"] = vmid
	var upid string
	err := c.post(ctx, "/nodes/"+node+"/qemu", params, &upid)
	return upid, err
}

// ConvertToTemplate turns a stopped VM into a template and returns the task's UPID.
func (c *Client) ConvertToTemplate(ctx context.Context, node string, vmid int) (string, error) {
	var upid string
	err := c.post(ctx, vmPath(node, vmid, "template"), nil, &upid)
	return upid, err
}

// DeleteOptions are what a VM's deletion removes besides the VM.
type DeleteOptions struct {
	// Purge removes the VM from backup jobs, replication and HA too.
	Purge bool
	// DestroyUnreferencedDisks also destroys the disks of the VMID that its config
	// does not reference.
	DestroyUnreferencedDisks bool
}

// Delete destroys a stopped VM with its disks and returns the task's UPID.
func (c *Client) Delete(ctx context.Context, node string, vmid int, o DeleteOptions) (string, error) {
	query := map[string]string{}
	if o.Purge {
		query["purge"] = "1"
	}
	if o.DestroyUnreferencedDisks {
		query["destroy-unreferenced-disks"] = "1"
	}
	var upid string
	err := c.del(ctx, vmPath(node, vmid), query, &upid)
	return upid, err
}

// RunStatus is a VM's state as status/current reports it.
type RunStatus struct {
	// Status is running or stopped; a paused VM is running.
	Status string `json:"status"`
	// QMPStatus also tells running, paused and suspended apart.
	QMPStatus string `json:"qmpstatus"`
	// PID is the process ID of the VM's QEMU on its node, while it runs: a new process,
	// and so a new PID, for every start.
	PID int `json:"pid"`
}

// Running reports whether the VM's QEMU process runs, paused included.
func (s RunStatus) Running() bool { return s.Status == "running" }

// CurrentStatus reads a VM's status/current, which tells a paused VM from a running
// one (the cluster's listing does not).
func (c *Client) CurrentStatus(ctx context.Context, node string, vmid int) (RunStatus, error) {
	var st RunStatus
	err := c.get(ctx, vmPath(node, vmid, "status", "current"), nil, &st)
	return st, err
}

// Start starts a stopped VM and returns the task's UPID.
func (c *Client) Start(ctx context.Context, node string, vmid int) (string, error) {
	return c.power(ctx, node, vmid, "start", map[string]any{})
}

// Stop stops a VM at once, as pulling its plug would, and returns the task's UPID.
func (c *Client) Stop(ctx context.Context, node string, vmid int) (string, error) {
	return c.power(ctx, node, vmid, "stop", nil)
}

// Shutdown asks the guest to shut down and returns the task's UPID; with forceStop,
// PVE stops the VM when the guest has not within timeout, in the same task.
func (c *Client) Shutdown(ctx context.Context, node string, vmid int, timeout time.Duration, forceStop bool) (string, error) {
	params := map[string]any{"timeout": int(timeout.Seconds())}
	if forceStop {
		params["forceStop"] = 1
	}
	return c.power(ctx, node, vmid, "shutdown", params)
}

// Suspend pauses a running VM in memory and returns the task's UPID.
func (c *Client) Suspend(ctx context.Context, node string, vmid int) (string, error) {
	return c.power(ctx, node, vmid, "suspend", map[string]any{})
}

// Resume resumes a paused VM and returns the task's UPID.
func (c *Client) Resume(ctx context.Context, node string, vmid int) (string, error) {
	return c.power(ctx, node, vmid, "resume", map[string]any{})
}

// power posts a power action to a VM.
func (c *Client) power(ctx context.Context, node string, vmid int, action string, params map[string]any) (string, error) {
	var upid string
	err := c.post(ctx, vmPath(node, vmid, "status", action), params, &upid)
	return upid, err
}

// AgentAddresses asks the VM's guest agent for its interfaces' addresses, in the
// order it reports them. Before the agent runs PVE answers an error.
func (c *Client) AgentAddresses(ctx context.Context, node string, vmid int) ([]string, error) {
	var res struct {
		Result []struct {
			IPAddresses []struct {
				Address string `json:"ip-address"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	if err := c.get(ctx, vmPath(node, vmid, "agent", "network-get-interfaces"), nil, &res); err != nil {
		return nil, err
	}
	var out []string
	for _, iface := range res.Result {
		for _, a := range iface.IPAddresses {
			out = append(out, a.Address)
		}
	}
	return out, nil
}
