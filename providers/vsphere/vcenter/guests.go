package vcenter

import "context"

// guestAddressProperties are the VM properties GuestAddresses reads: those a VM's
// providerID and addresses are made of, as a VM read reads them.
var guestAddressProperties = []string{"config.uuid", "guest.ipAddress", "guest.net"}

// GuestAddresses reads the UUID and guest addresses (UUID, GuestIP and GuestNICs) of
// every VM under container, a datacenter or the root folder, through one container view
// in one property collector call, whatever the number of VMs.
func (c *Client) GuestAddresses(ctx context.Context, container Ref) ([]VM, error) {
	objs, err := c.retrieveIn(ctx, container.ref(), map[string][]string{"VirtualMachine": guestAddressProperties})
	if err != nil {
		return nil, c.fail("read the addresses of the VMs' guests", err)
	}
	out := make([]VM, 0, len(objs))
	for _, oc := range objs {
		out = append(out, *vmOf(oc.Obj, oc.PropSet))
	}
	return out, nil
}

// MarkedVMs reads, in one property collector call, the VMs and templates below
// container with their name, BIOS UUID, template flag and the Client's IdentityKey in
// extraConfig (VM.Identity), read as a keyed path: a VM without the key reports it
// missing, and is returned with an empty Identity.
func (c *Client) MarkedVMs(ctx context.Context, container Ref) ([]VM, error) {
	objs, err := c.retrieveIn(ctx, container.ref(), map[string][]string{"VirtualMachine": {"name", "config.uuid", "config.template", c.identityProperty()}})
	if err != nil {
		return nil, c.fail("read the identity marks of the VMs", err)
	}
	out := make([]VM, 0, len(objs))
	for _, oc := range objs {
		out = append(out, *vmOf(oc.Obj, oc.PropSet))
	}
	return out, nil
}
