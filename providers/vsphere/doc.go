// Package vsphere is banlieue's vSphere backend: a providersdk.Driver that turns
// VSphereMachines into VMs cloned from templates on a vCenter.
//
// It holds the driver's policy: which template, where a VM goes (placement.go), the shape
// of its clone, which hardware changes are made online, power, identity, failure domains
// and images. Every vCenter call goes through its service layer, package vcenter, the
// only package of the driver that imports govmomi; the provider SDK and the controllers see
// nothing but the providersdk types. The VM Observe reads travels in
// Observation.State to the Create, Update or Delete of the same reconcile, which use it
// instead of looking the VM up again.
//
// # Connection
//
// spec.connection.endpoint is a vCenter URL such as https://vc.example.com/sdk, or a bare
// host, to which /sdk is added. The credentials Secret holds the keys "username" and
// "password". The server certificate is verified against spec.connection.caBundle when it
// is set and against the system roots otherwise; spec.connection.insecureSkipTLSVerify
// turns verification off, for test backends only. A session logs in once, is kept alive
// and logs in again when vCenter forgets it (after a restart, for example).
//
// # Provider parameters
//
// spec.parameters holds defaults for every machine of the Provider:
//
//	datacenter    limits the failure domains to one datacenter (name or inventory path)
//	folder        VM folder for new VMs: an inventory path, or a path relative to the
//	              datacenter's VM folder; the datacenter's VM folder by default
//	resourcePool  resource pool for new VMs: an inventory path, or a path relative to the
//	              failure domain's cluster root pool ("Resources"); the root pool by default
//	datastore     datastore for disks whose storage class names none
//	hotplug       cpu, memory or cpu,memory: new VMs are cloned with CPU or memory
//	              hot-add on, so that their CPUs or memory grow while they run; a VM
//	              without it takes an increase at its next power cycle (RestartRequired)
//
// A VSphereMachine's spec.vsphere block (infrav1.VSphereOptions) overrides each of them
// for that machine (its datastore overrides the boot disk's storage class target too),
// and adds cloneMode: full (the default) or linked (which needs a snapshot on the
// template and cannot grow its disks). New disks are thin unless their provisioning says
// thick or eagerZeroed.
//
// # Images
//
// A Template source's ref is a template's name or inventory path; the image resolves to
// the template's managed object ID (of several with the name, the oldest). When the
// template is missing and importFrom names an OVA (or an .ovf whose files sit next to it),
// the session downloads it, checks the checksum, imports it into the first failure domain
// (the datastore parameter, or the datastore with the most free space) and marks it a
// template named ref. A Url source is imported the same way as a template named after the
// VMImage.
//
// # Capabilities
//
// Storage class targets use the key "datastore" (a datastore name) or "datastoreCluster"
// (a datastore cluster, StoragePod, name: the child datastore with the most free space is
// used). Network class targets use the key "network": the name of a standard port group,
// distributed port group or opaque network. A class without a vSphere key is available
// everywhere and falls back to the defaults (the template's network, the datastore
// parameter or the template's datastore).
//
// # Failure domains
//
// Every compute cluster of a datacenter is a failure domain (standalone hosts are not).
// Its name is "<datacenter>-<cluster>", lowercased, with every character other than a
// letter, digit, '-' or '.' replaced by '-', at most 63 characters; when two clusters
// would get the same name, the later one in inventory-path order gets a suffix made from
// its managed object ID. The name therefore only changes when the datacenter or cluster is
// renamed. Labels "dc" and "cluster" hold the names made label-value safe; attributes.raw
// holds datacenterPath, clusterPath and resourcePool (the cluster's root pool ID).
//
// # Identity
//
// A VM's instance UUID is its machine's UID, set in the clone spec and looked up with the
// SearchIndex; extraConfig "banlieue.machine.uid" repeats it and is checked on every lookup.
// The VM's name is "<namespace>.<name>" (providersdk.BackendName: a namespace has no
// '.', so two machines never share a name), made to fit vSphere's 80 characters with a
// hash suffix when it is longer. A clone that a crashed provider started is found again, either
// by its UUID or, when the second clone fails with DuplicateName, by its name.
//
// # Guest addresses
//
// A VM's addresses are its guest's (guest.ipAddress, then guest.net, without link-local
// addresses), as VMware Tools report them; its providerID is "vsphere://<config.uuid>".
// The session is a providersdk.GuestAddressReporter: on the Provider's inventory
// refresh, one property collector call through a container view of the Provider's
// datacenter (of the whole vCenter when its failure domains span several) reads those
// properties of every VM, so a VM whose guest reports an address late is woken without
// each such VM being looked at in between.
package vsphere
