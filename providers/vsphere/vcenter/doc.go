// Package vcenter is the vSphere driver's service layer: the one package of the driver
// that imports govmomi (the simulator and the tests aside). It holds a logged-in vCenter
// session (authenticated again when vCenter forgets it, kept alive, every call counted in
// providersdk.BackendCalls) and the calls the driver makes through it: finding and
// reading VMs, polling tasks, discovering the inventory through a container view,
// finding templates, cloning, reconfiguring, power operations, destroying, importing OVA
// and OVF packages, and reading the guests' addresses.
//
// It decides nothing: which template, where a VM goes, what shape it has, when it may be
// resized and whether a VM is the machine's are the driver's policy (package vsphere).
// What it returns is backend-neutral (VM, Template, Inventory, TaskInfo, Ref hold plain
// fields), a missing object is ErrNotFound (IsNotFound), and the errors of vCenter calls
// are the provider SDK's typed errors: Unreachable, Unauthorized, Permanent, InFlight.
package vcenter
