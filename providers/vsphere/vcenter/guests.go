package vcenter

import "context"

// guestAddressProperties are the VM properties GuestAddresses reads: those a VM's
// providerID and addresses are made of, as a VM read reads them.
var guestAddressProperties = []string{"config.uuid", "guest.ipAddress", "guest.net"}

// GuestAddresses reads the UUID and guest addresses (UUID, GuestIP and GuestNICs) of
// every VM under container, a datacenter or the root folder, through one container view
// in one property collector call, whatever the number of VMs.
func (c *Client) GuestAddresses(ctx context.Context, container Ref) ([]VM, error) {
	return c.vmsIn(ctx, container, guestAddressProperties, "read the addresses of the VMs' guests")
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
