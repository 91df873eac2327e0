// Package libvirt is banlieue's libvirt backend: a providersdk.Driver that turns
// LibvirtMachines into libvirt domains on one KVM host per Provider.
//
// This package is the driver's policy: what a machine's domain is named, which pools
// and networks it uses, what it is defined with, when it is resized or powered, what the
// failure domain offers, how images are found. Every call to libvirtd is made by its
// service layer, package host, the only one of banlieue that imports go-libvirt
// (libvirt's RPC protocol in pure Go, so no libvirt C library is needed and remote hosts
// are reached directly) and libvirtxml; it answers with plain data (host.Domain,
// host.Volume, host.Capabilities) and typed not-found errors. The provider SDK and the
// controllers see nothing but the providersdk types.
//
// # Connection
//
// spec.connection.endpoint is a libvirt URI:
//
//	qemu:///system, test:///default      libvirtd's default socket on this machine
//	qemu+unix:///system?socket=/path     a socket elsewhere
//	qemu+ssh://user@host[:port]/system   SSH, then libvirtd's socket on the host (?socket= to
//	                                     change it); the Secret holds "ssh-privatekey" and
//	                                     "known_hosts", which is mandatory: host keys are
//	                                     always checked (hashed names and @revoked honoured)
//	qemu+tls://host[:port]/system        TLS to libvirtd's port 16514; the Secret holds
//	                                     "tls.crt" and "tls.key" (the client certificate),
//	                                     the CA comes from spec.connection.caBundle or the
//	                                     Secret's "ca.crt", else the system roots
//
// Unencrypted qemu+tcp is refused. A session keeps one connection and dials again when
// it dropped (libvirtd restarted); a call that outlives the reconcile's deadline closes
// the connection, since go-libvirt calls take no context, and is reported unreachable.
// Image imports use a connection of their own.
//
// # Provider parameters
//
//	pool           storage pool of disks whose storage class names none; "default"
//	imagePool      storage pool Url images are imported into; pool's by default
//	network        libvirt network of interfaces whose network class names none; "default"
//	failureDomain  the failure domain's name; the host name (DNS-label safe) by default
//	domainType     kvm or qemu (TCG); the fastest the host offers by default
//	hotplug        cpu, memory or cpu,memory: the headroom new domains get to grow
//	               while they run (see Resizing); none by default
//	maxCPUs        how many CPUs a domain made with CPU hotplug may grow to while it
//	               runs; 4 times its CPUs, at most 64, by default
//	maxMemoryMiB   how much memory a domain made with memory hotplug may grow to while
//	               it runs; 4 times its memory by default
//
// Hotplug parameters that do not parse are the Provider's inventory error, which keeps
// it from Ready, and no domain is created until they are fixed.
//
// A LibvirtMachine's spec.libvirt (infrav1.LibvirtOptions) sets storagePool (the boot
// disk's pool), machineType (q35 by default on QEMU/KVM: it has the SATA controller of
// the seed CD-ROM and the SMM Secure Boot needs) and cpuMode (e.g. host-passthrough).
//
// # Capabilities and failure domain
//
// Storage class targets use the key "pool" (a storage pool's name). Network class
// targets use "network" (a libvirt network) or "bridge" (a host bridge, for a NIC of type
// bridge). The host is one failure domain, labelled with the Provider's labels plus
// "host" (its host name); a class is available when its pool or network exists and is
// active (a bridge when libvirt's interface driver lists it, or always when the host has
// no interface driver). Features: "efi" and "efiSecureBoot" when the domain capabilities
// offer UEFI firmware (with Secure Boot), "nestedVirtualization" when the host runs KVM on
// a CPU with vmx or svm; features the Provider declares are passed through.
//
// # Identity
//
// A domain's UUID is its machine's UID (Kubernetes UIDs are UUIDs), and its <metadata>
// holds a banlieue element (namespace MetadataNamespace) with the UID again, the machine's
// namespace and name, and the volumes made for it. Lookups are by UUID, and a domain with
// the UUID but another UID in its metadata is never touched (IdentityMismatch). libvirt
// refuses a second domain with a UUID, so a provider killed mid-create adopts what it
// made: Create defines the domain only when none has the UUID, and finds volumes by
// name. Observe hands the domain it found to Update and Delete in the Observation's
// State, so they never look it up again. The domain is named "<namespace>.<name>"
// (providersdk.BackendName: a namespace has no '.', so two machines never share a name;
// cut with a hash beyond 100 characters); a domain of that name that is not the
// machine's is a NameConflict.
//
// # Disks, seed and devices
//
// Volumes are named "<machine UID>-<disk name>.qcow2" in their storage class's pool. The
// first disk is a qcow2 overlay whose backing file is the image volume (in dir, fs and
// netfs pools) or a full copy of it (in block pools, which hold no overlays), sized by
// the class (the image's size when the class has no disks); further disks are blank,
// preallocated when their provisioning is thick or eagerZeroed. Every machine banlieue
// creates (not one it adopts) gets a NoCloud seed, so that cloud-init in the guest finds
// its data source and names the guest after the machine even without user data: an ISO
// 9660 image (Rock Ridge and Joliet, label "cidata") built in process with user-data
// (empty when the machine has none), meta-data (instance-id = the machine's UID,
// local-hostname = its name) and, with static IPAM, a network-config
// that finds each NIC by the MAC the domain gives it (nocloud.MachineMACs; libvirt
// chooses the MACs otherwise, and the guest takes DHCP on its first NIC), uploaded through libvirt's volume upload stream as "<UID>-cidata.iso" and
// attached as a SATA CD-ROM. Domains have virtio disks and NICs, a serial console (no
// graphics device) and a virtio channel for the QEMU guest agent; firmware is BIOS, UEFI
// (libvirt's firmware auto-selection) or UEFI with Secure Boot and enrolled keys (SMM on).
// The hypervisor is KVM when the host offers it, TCG otherwise, unless the Provider's
// parameter domainType names one (qemu, i.e. TCG, for hosts whose KVM cannot run the
// guests, as some nested setups cannot run OVMF). Without it, a domain whose QEMU
// refuses the KVM libvirt offered (a /dev/kvm closed to QEMU's user) is redefined for
// TCG and started, and the session's later domains run under TCG; with domainType kvm
// the machine is HypervisorUnavailable, quoting QEMU.
//
// # Power
//
// PoweredOff presses the ACPI power button and records a task "shutdown:<UUID>/<boot>"
// that Observe reports in flight while the guest runs that boot, for the shutdown
// timeout (2 minutes by default); then the domain is destroyed. A restart's power cycle
// is over once the domain runs a new boot. Suspended is a managed save: memory goes to
// disk and the domain stops, which frees the host's memory and survives host reboots
// like a vSphere suspend; starting the domain resumes it. A domain paused on purpose
// (libvirt's pause reason "user") is reported Suspended and resumed for PoweredOn; one
// the hypervisor stopped by itself (a guest crash, an I/O error, a KVM failure) is
// reported with GuestStopped, saying how to restart it, and is left as it is. A pause
// libvirt ends by itself (starting up, a save, a migration) is waited for: a provider
// restarted while libvirt starts a domain sees it paused "starting up" for seconds.
//
// Addresses come from the DHCP leases of the domain's MACs on its libvirt networks, then
// from the guest agent. A running machine is WaitingForGuest until it reports as many
// addresses as the domain has NICs (at least one), so the address of a NIC that came up
// later, or a static one only the agent knows, reaches the status too. providerID is libvirt://<host>/<domain UUID>, with the endpoint's
// host, or the host name for a local socket.
//
// # Resizing
//
// A shut-off domain takes any change of CPUs, memory and disks (volumes only grow). A
// running domain that should stay on takes what libvirt can change online, live and
// in its persistent definition, in the same boot:
//
//   - a disk grows through QEMU (block resize);
//   - CPUs grow up to the domain's <vcpu> maximum (virDomainSetVcpusFlags);
//   - memory grows by a DIMM of the difference, plugged into NUMA node 0, up to
//     <maxMemory>, while one of its slots is free, by a multiple of 2 MiB (QEMU's DIMM
//     alignment on x86_64).
//
// The rest (fewer CPUs or less memory, growth beyond the maxima, new disks) waits for
// its next power cycle (a restart, or PoweredOff then back), which the machine says
// with RestartRequired=True while it stays Ready; Observe reports pending exactly what
// Update does not do online. Steps aim at the spec's values from what the live domain
// has, so a step repeated after a crash plugs no second DIMM.
//
// The headroom is set at creation, by the Provider's hotplug parameter: with "cpu" the
// domain is defined with <vcpu current='N'>MAX</vcpu>, with "memory" with <maxMemory
// slots='16'>MAX</maxMemory> and one NUMA cell holding all its CPUs and its memory
// (DIMMs plug into a NUMA node); MAX comes from maxCPUs and maxMemoryMiB
// (providersdk.Hotplug.Limits). Memory already at its maximum gets no <maxMemory>, as
// QEMU refuses DIMM slots without room. banlieue's metadata records the hotplug the domain was
// made with. A resize while shut off sets the maxima again for the new size, with the
// Provider's maxCPUs and maxMemoryMiB as they are then, and folds the DIMMs into the NUMA
// cell, which frees the slots; a memory growth once all 16 are taken waits for the next
// power cycle, which makes it that way. Domains made without hotplug, before
// the parameter was set or adopted, keep growing only at their next power cycle;
// hotplug is off by default, since the guest sees a NUMA topology and possible CPUs it
// would not otherwise. The guest must bring hot-added CPUs and memory online: Linux on
// x86 adds them offline unless a udev rule onlines them (Ubuntu's 40-vm-hotadd.rules,
// RHEL's 40-redhat.rules, the 40-banlieue-hotadd.rules of banlieue's guest image), and
// uses memory in blocks of 128 MiB, so memory grown by a multiple of 128 MiB is all
// used.
//
// # Deletion
//
// Delete destroys the domain, undefines it with its managed save image and NVRAM, and
// deletes the volumes its metadata lists plus any volume in an active pool whose name
// starts with the machine's UID (left by a create killed before it defined the domain).
// Image volumes are never deleted.
//
// # Images
//
// A BackingFile source's ref is an existing volume, "<pool>/<volume>" or an absolute
// path; with importFrom, a missing "<pool>/<volume>" is imported there. A Url source
// (importFrom) is imported into the image pool as "banlieue-image-<VMImage
// name>-<12 hex digits of the checksum's SHA-256>", so a changed checksum imports anew and
// a finished import is found rather than repeated. An import downloads over HTTP(S) to a
// temporary file, verifies the sha256 or sha512 checksum, uploads through libvirt's
// stream into "<volume>.part" (qcow2 when the file starts with qcow2's magic, raw
// otherwise), copies that to the volume and deletes it, so the volume exists only
// complete; progress and errors (HTTP status, checksum mismatch, libvirt's errors such
// as a full pool) are the image row's message. A failed import is retried after 5 minutes.
package libvirt
