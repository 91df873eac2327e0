package vcenter

import "context"

// guestPrimaryProperties are what GuestPrimaryAddresses reads of every VM: the UUID a
// providerID is made of and the guest's primary address. Not guest.net: each NIC's
// network, MAC, addresses and IP and DNS configuration make it most of what a read of
// the guests costs vCenter, and it is read only for the VMs that need it.
var guestPrimaryProperties = []string{"config.uuid", "guest.ipAddress"}

// guestAddressProperties add the addresses of each of the guest's NICs: all a VM read
// reads of the guest's addresses.
var guestAddressProperties = []string{"config.uuid", "guest.ipAddress", "guest.net"}

// GuestPrimaryAddresses reads the UUID and the guest's primary address (UUID and
// GuestIP, not GuestNICs) of every VM under container, a datacenter or the root folder,
// through one container view in one property collector call, whatever the number of
// VMs.
func (c *Client) GuestPrimaryAddresses(ctx context.Context, container Ref) ([]VM, error) {
	return c.vmsIn(ctx, container, guestPrimaryProperties, "read the primary addresses of the VMs' guests")
}

// GuestAddresses reads the UUID and guest addresses (UUID, GuestIP and GuestNICs) of the
// VMs refs in one property collector call. vCenter refuses the whole call when one of
// them no longer exists; the error is then ErrNotFound.
func (c *Client) GuestAddresses(ctx context.Context, refs []Ref) ([]VM, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	objs, err := c.retrieveVMs(ctx, refs, guestAddressProperties, "a VM whose guest's addresses were asked for", "read the addresses of the VMs' guests")
	if err != nil {
		return nil, err
	}
	out := make([]VM, 0, len(objs))
	for _, oc := range objs {
		out = append(out, *c.vmOf(oc.Obj, oc.PropSet))
	}
	return out, nil
}

// MarkedVMs reads, in one property collector call, the VMs and templates below
// container with their name, BIOS and instance UUIDs, template flag and the Client's IdentityKey in
// extraConfig (VM.Identity), and its MarkKeys (VM.Marks), read as keyed paths: a VM
// without a key reports it missing, and is returned without its value.
func (c *Client) MarkedVMs(ctx context.Context, container Ref) ([]VM, error) {
	props := make([]string, 0, 5+len(c.markKeys))
	props = append(props, "name", "config.uuid", "config.instanceUuid", "config.template", c.identityProperty())
	for _, k := range c.markKeys {
		props = append(props, extraConfigProperty(k))
	}
	return c.vmsIn(ctx, container, props, "read the identity marks of the VMs")
}

// vmsIn reads properties of every VM below container in one property collector call;
// what names the read for an error.
func (c *Client) vmsIn(ctx context.Context, container Ref, properties []string, what string) ([]VM, error) {
	objs, err := c.retrieveIn(ctx, container.ref(), map[string][]string{"VirtualMachine": properties})
	if err != nil {
		return nil, c.fail(what, err)
	}
	out := make([]VM, 0, len(objs))
	for _, oc := range objs {
		out = append(out, *c.vmOf(oc.Obj, oc.PropSet))
	}
	return out, nil
}
