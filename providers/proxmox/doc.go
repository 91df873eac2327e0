// Package proxmox is banlieue's Proxmox VE backend: a providersdk.Driver that turns
// ProxmoxMachines into QEMU VMs cloned from templates on a PVE cluster (or a single
// node), through PVE's REST API.
//
// This package is the driver's policy: which VM is a machine's, how it is named, which
// template it is cloned from and onto which node, which config keys change, when power
// changes, how VMIDs are allocated, how user data and images get there. Every API
// call goes through its service layer, package pve, a typed client over
// github.com/luthermonson/go-proxmox that holds every REST path and classifies PVE's
// errors; the provider SDK and the controllers see nothing but the providersdk types.
//
// # Connection
//
// spec.connection.endpoint is the API URL, https://pve.example.com:8006/api2/json, or a
// bare host, to which https://, port 8006 and /api2/json are added. The credentials
// Secret holds either an API token, keys "tokenID" (user@realm!name) and "tokenSecret",
// or a user, keys "username" (user@realm) and "password", which logs in for a ticket
// that is renewed as it expires; the token wins when both are there. A missing key is a
// permanent error naming the key, never a value. The server certificate is verified
// against spec.connection.caBundle (a node's /etc/pve/pve-root-ca.pem) when it is set
// and against the system roots otherwise; spec.connection.insecureSkipTLSVerify turns
// verification off, for test backends only. One session per Provider is reused by
// every reconcile; every API call is counted in banlieue_backend_calls_total under its
// method and path template.
//
// # Provider parameters
//
//	node             comma-separated nodes that may hold VMs; every online node by default
//	pool             resource pool new VMs join (spec.proxmox.pool overrides it)
//	isoStorage       storage that holds the machines' NoCloud seed ISOs; by default
//	                 the first storage of the VM's node with the iso content type,
//	                 a shared one first
//	snippetsStorage  storage that holds user-data snippets, with a SnippetWriter; by
//	                 default the first storage of the VM's node with snippets
//	imageStorage     storage that Url images are downloaded to; by default the first
//	                 storage of the import node with the import content type
//	templateStorage  storage of imported templates' disks; by default the import
//	                 node's first shared storage for VM images, else its first one
//	hotplug          cpu, memory or cpu,memory: new VMs get the headroom to grow their
//	                 CPUs or memory while they run (see Growing a running VM); off by
//	                 default, and read only as a VM is made
//	maxCPUs          the CPUs a VM made with CPU hotplug may grow to while it runs: its
//	                 cores; 4 times its CPUs, at most 64, by default, and never more
//	                 than its node's CPUs
//	maxMemoryMiB     not used: PVE 8 has no maximum of hotplugged memory to set, and
//	                 its own (the host's physical address bits) applies
//
// Hotplug parameters that do not parse keep the Provider from Ready (Inventory fails
// with what to fix), and Create makes no VM until they are fixed.
//
// A ProxmoxMachine's spec.proxmox block (infrav1.ProxmoxOptions) may also name the node
// (overriding the failure domain) and cloneMode: full (the default) or linked (which
// needs a template on storage that supports it and keeps disks on the template's
// storage).
//
// # Images
//
// A Template source's ref is a template's VMID ("9000") or its name (of several with
// the name, the lowest VMID); it resolves to "<node>/<vmid>".
//
// A Url source (importFrom, or a URL in ref), and a Template source whose template is
// missing but which has importFrom, is imported as a template, which needs a PVE release
// whose storages offer the import content type for disk images (an 8.x release). The import goes on the first online
// node of the node parameter (of all nodes, by name, without one) and takes a step
// per ResolveImage call, none waiting for PVE: download-url fetches the image into
// the import storage as import/banlieue-<image>-<key>.<ext> (key: the first 12 hex
// digits of the checksum, else of the URL's SHA-256; ext: qcow2, raw or vmdk from the
// URL, qcow2 for .img), and PVE verifies the checksum; then a VM on a new VMID gets
// scsi0 imported from the file (import-from), a cloud-init drive, a virtio NIC on the
// node's first bridge, the guest agent and a serial console; then it is converted to
// a template. Its name is a Template source's ref, a Url source's ref when that is a
// name, else banlieue-<image>-<first 8 digits of the key>; its description holds
// "banlieue.io/image-uid: <VMImage UID>" and "banlieue.io/image-file: <file>", its
// identity. Every call reads where the import stands from PVE (the template, a VM not
// yet converted, the file in the import storage, a download task of the file running
// on the node), so a provider that restarts carries on without downloading again; a
// changed checksum is a new file and a new template. While it runs the image is
// Importing with what it does; a refusal or failed task (a 404, an unreachable URL,
// "checksum mismatch: got … != expect …", a full storage) is ImportFailed with PVE's
// words, reported for 5 minutes and then tried again. Templates on local storage
// clone to other nodes only when PVE allows it (see Machines): set templateStorage to
// a shared storage for a cluster.
//
// # Capabilities and failure domains
//
// Every online node is a failure domain named after the node, with the label node=<name>
// and attributes.raw node=<name>. Storage class targets use the key "storage" (a PVE
// storage ID), network class targets the key "bridge" (a Linux or OVS bridge); a class
// is available on a node that has that storage (available) or bridge, and everywhere
// when it has no such key. Every node reports the feature efiSecureBoot (OVMF with
// pre-enrolled keys); features the Provider declares are passed through.
//
// # Machines
//
// A VM is a clone of the template onto the failure domain's node (with target when the
// template is elsewhere, which PVE allows only from shared storage) and, for a full
// clone, onto the first disk's storage. Its VMID is the next free one PVE names, which
// reserves nothing: PVE reserves the VMID when it answers the clone request. So the
// driver's workers take VMIDs from one pool per cluster, which asks PVE once and counts
// up past the VMIDs still in flight, and never get the same VMID; a clone refused
// because another client of the cluster took the VMID meanwhile takes another, and the
// pool asks PVE again. PVE decides the race in the clone's
// worker too: a clone task that fails because another request's worker had the VMID
// first ("can't lock file '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout", or
// "unable to create VM <vmid>: config file already exists") left no VM, so the
// machine, whose status.proxmox names a VM that is not its own, is cloned again on a
// new VMID at once rather than reported TaskFailed. A change refused because the VM
// is busy (another task holds its config lock longer than PVE's 10-second wait, its
// config carries a lock, or someone changed it since it was read) is a wait, retried
// soon; a cluster without quorum ("cluster not ready - no quorum?", or its read-only
// /etc/pve) is reported as an unreachable backend, saying so, and retried with
// backoff until quorum is back. Once the clone task ends, Update shapes
// it one step a call: one config update (cores, memory, firmware: bios=ovmf with an
// efidisk0, machine q35 and pre-enrolled keys for efi-secure; added disks scsiN on
// their storage class's storage; NIC i on interface i's bridge keeping the template's
// model and MAC, extra template NICs removed; ipconfigN from the interface's IPAM, dhcp
// or static, and nameserver; the user data's seed CD-ROM, or cicustom; the identity
// tag; at creation, the hotplug headroom), then a resize task per disk to grow, then
// power. CPU and memory increases PVE hotplugs are made in the running VM; other CPU,
// memory and firmware changes are made while the VM is stopped: asked of a running VM,
// they wait for its next power cycle (RestartRequired, the VM staying Ready) and the
// rest of the config is written at once; disks only grow (DiskShrinkNotSupported
// otherwise).
//
// # Growing a running VM
//
// Proxmox VE writes a config change of a running VM into the config's pending section
// and applies at once what the VM's hotplug setting lets it, the rest at its next start
// or stop. With the Provider's hotplug parameter, the first config update after the
// clone gives the VM the headroom to grow: "cpu" in hotplug besides the template's
// features (PVE's default network,disk,usb), cores the CPUs it may grow to (maxCPUs)
// with one socket and vcpus its CPUs; "memory" in hotplug with numa 1, which memory
// hotplug needs (not for a VM below 1024 MiB, which PVE would not start so). A running
// VM then grows online, in the same QEMU process: CPUs up to cores × sockets (vcpus is
// written), memory by whole DIMMs (to PVE's DIMM steps: 512 MiB steps up to 17 GiB,
// 1 GiB up to 49 GiB, 2 GiB up to 113 GiB…). Anything else (a decrease, which PVE would
// unplug online; CPUs beyond the cores; memory between DIMM steps; a VM without the
// hotplug feature) the driver holds back for the next power cycle itself, so it leaves
// PVE nothing pending it did not mean to, and Observation.PendingRestart lists exactly
// that. On a stopped VM with vcpus, CPUs beyond the cores raise the cores to the
// Provider's bound for the new count. The driver reads a VM's config with GET pending:
// status.hardware is what the VM runs (CPUs are vcpus when set, else cores × sockets);
// a hotplug PVE refuses anyway (memory beyond the host's maximum) stays pending in PVE
// and is reported waiting; a pending CPU or memory value the machine does not want is
// reverted. See hotplug.go and docs/providers/proxmox.md.
//
// User data reaches the guest through PVE's API alone, as a NoCloud seed: an ISO 9660
// image labelled cidata (package nocloud) with user-data, meta-data (instance-id = the
// machine's UID, local-hostname = its name) and, when an interface has static IPAM,
// network-config (version 2: each interface found by its MAC, its addresses, default
// routes and name servers; DHCP for the others). PVE gives a clone's NICs new random
// MACs, so NIC i of such a machine gets a locally administered MAC made from the
// machine's UID and i, which the seed names. Create, the one call that has the user
// data, uploads it (POST .../storage/{storage}/upload, content iso) as
// iso/banlieue-<uid>-<hash>.iso (hash: 8 hex digits of the seed's SHA-256) to the
// isoStorage parameter's storage, else the VM's node's first storage for ISO images,
// shared ones first, and returns the upload's task; the next Create finds the file in
// the storage's listing and clones, naming it in the VM's description. So an unchanged
// seed is uploaded once whatever happens to the provider, a changed one is a new file
// (the machine's other seeds there are removed), and the VM never names an ISO that is
// not there. Update attaches it before the first start as a CD-ROM on the template's
// cloud-init drive (ide2 usually), which it replaces: the guest sees one NoCloud source,
// ours, and PVE frees the cloud-init volume (templates without one get the first free
// IDE slot, then SATA). A node without a storage for ISO images is PlacementInvalid,
// naming the node and what to configure. The seed is not the VM's own volume, so
// Delete, once the VM is destroyed, removes every banlieue-<uid>-*.iso of the machine
// from the node's ISO storages, and waits for that too.
//
// With a SnippetWriter (WithSnippetWriter), for installations that mount their nodes'
// snippets storage, user data is a cloud-init snippet instead,
// snippets/banlieue-<uid>.yaml, referenced by cicustom user=<storage>:snippets/<name>;
// PVE generates the meta-data and network config from ipconfigN. PVE's API cannot
// upload snippets: DirSnippetWriter writes them to a storage the provider mounts. Delete
// removes the snippet through the storage API.
//
// # Identity
//
// The machine's UID is in the clone's description (a line "banlieue.io/machine-uid:
// <uid>"), set by the clone request itself, and in the tag banlieue-<uid>, added by the
// first config update (PVE's clone takes no tags) with the tag banlieue.cluster-<uid>
// naming the machine's cluster (ClusterTagPrefix). The VM's name is
// "<namespace>-<name>-<hash>" (providersdk.BackendName), a DNS label of at most 63
// characters, because PVE's cloud-init makes the guest's host name from it; the hash of
// namespace and name keeps two namespaces' machines apart. spec.providerID is proxmox://<cluster>/<vmid>, the cluster's
// name from the cluster's status, or the Provider's name on a standalone node;
// status.proxmox holds the node and VMID.
//
// Where a VM is lives in one place, the machine's status.proxmox (node and VMID),
// written from Observe's details and from Create's, which names the clone's target node
// and new VMID before the clone ends. A VM is found there with one call whatever the
// cluster's size: its config is read and it is the machine's VM when its description
// names the machine's UID. Otherwise (nothing recorded, the VM moved to another node,
// the VMID now another VM's, the VM gone, its node not answering) the cluster's guests
// are listed with one call and the VM found there by tag or name, confirmed the same
// way. So a machine reconciled again costs no listing, and a VM that is gone takes one
// to be sure it did not move. A new machine costs one: Observe hands its listing (or
// the VM it found) to the Create, Update or Delete of the same reconcile in
// Observation.State, and they act on it without reading PVE again. The listing's
// names, status and template flags come from pvestatd, which reports every 10
// seconds: a new VM is listed with status unknown and no name until then (a clone
// still in flight then keeps PVE's "VM <vmid>"), while tags and locks are current. So
// when no guest matches, the guests the listing has not named yet are confirmed by
// their config too, but for clones in flight and the VMs this session cloned for other
// machines; they are few and briefly there, and a template just imported is taken by
// its config's flag. Either way a VM with
// the tag but another UID is left alone (IdentityMismatch). A clone in flight has
// neither name nor description (its config holds only lock: clone), so a provider that
// crashed after starting one cannot recognise it: when Observe does not find the VM and
// some VM is locked by a clone the session did not start, it reads the running qmclone
// tasks of the template's node (of every template's node for a machine being deleted;
// a clone runs on its source's node), and reports any of the template (of any template)
// started since the machine was created, other than those the session started for
// other machines and, once the session cloned for the machine itself, those it did not
// start, as the task in flight; the machine waits for it instead of cloning again or
// being released. Each node's list of its running tasks is read, not /cluster/tasks,
// which PVE cuts to 32 KiB of running and recent tasks: on a busy cluster it may leave
// out the clone to wait for. When no such clone runs, the one that locked the VM has
// ended since the listing, and the VM it made may have been locked and nameless there,
// so the cluster is listed again.
//
// # Adoption
//
// A machine with spec.adoptProviderID (proxmox://<cluster>/<vmid>, the session's
// ProviderIDPrefix then a VMID) takes over a VM banlieue did not make; it is never
// cloned. Observe finds the VM by its VMID in the cluster's listing, which also gives
// its node and pool: an ID of another form or cluster and a template are
// AdoptionTargetInvalid, a VM off the node parameter's nodes or outside the pool
// parameter NotPermitted (the message names only the ID), a VM with another machine's
// tag or UID AlreadyManaged, and one without marks Unclaimed. Adopt then adds the
// machine's tag to the VM's tags and its description lines after the owner's notes, in
// one config update carrying the digest of the config Observe read: PVE refuses a
// stale digest, so of two machines adopting one VM one succeeds and the other is told
// AlreadyManaged. Nothing else changes, and from then on only CPUs, memory, disks and
// power are brought in line with the spec: the VM's firmware, NICs, cloud-init and
// user data are its owner's. Release takes the marks off again and leaves the owner's
// tags and notes as they were.
//
// # Power
//
// PoweredOn starts a stopped VM and resumes a paused one. PoweredOff is PVE's shutdown
// with forceStop: the guest has the shutdown timeout (WithShutdownTimeout, 2 minutes by
// default) to stop on its own, then PVE stops the VM, in one task. Suspended pauses the
// VM in memory (a stopped VM is started first). Every PVE task is the SDK's Task with
// the UPID as Ref, polled through Observe: running is in flight, an exit status other
// than OK is a TaskFailed carrying PVE's message. Addresses come from the guest agent;
// before it answers the VM is WaitingForGuest, not failed. Delete stops the VM when
// its current status says it runs (paused included), then destroys it with purge=1 and
// destroy-unreferenced-disks=1.
package proxmox
