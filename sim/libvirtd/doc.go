// Package libvirtd runs a real libvirtd from Debian's libvirt-daemon for tests: its own
// configuration, socket, state and QEMU processes, all under one temporary directory,
// stopped with everything it started when the test ends.
//
// # Why a mount namespace
//
// A libvirtd running as root (which the QEMU driver's system mode, qemu:///system, needs)
// keeps its state under compiled-in paths: /etc/libvirt (driver configuration such as
// qemu.conf), /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt.
// No option moves them. So the daemon is started in a private mount namespace in which
// the temporary directory's etc, run, lib, cache and log folders are bind-mounted over
// those paths: two daemons (two test packages at once) never share state, and nothing of
// a test outlives it. The paths are created, empty, on the host when they are missing, as
// mount points. The socket lives in the temporary directory itself, reachable from
// outside the namespace.
//
// # The QEMU driver's configuration
//
// The private qemu.conf sets:
//
//	user = "root", group = "root"   QEMU runs as root: the disks the tests make live in a
//	                                0700 temporary directory, and /dev/kvm (when present)
//	                                is root's only; a real host keeps libvirt-qemu.
//	security_driver = "none"        no AppArmor or SELinux in test containers.
//	namespaces = []                 no private /dev per domain (needs more than a container gives).
//	cgroup_controllers = []         containers rarely delegate cgroups.
//	stdio_handler = "file"          QEMU's output goes to a file, so no virtlogd is needed.
//
// libvirtd resolves its compiled-in default user and group (libvirt-qemu) before it reads
// qemu.conf, and refuses to start the QEMU driver when they do not exist, so Start creates
// the system user libvirt-qemu and the groups libvirt-qemu and kvm when they are missing
// (Debian's libvirt-daemon-system would).
//
// # Drivers
//
// qemu:///system runs real QEMU processes (KVM when the host offers it, TCG otherwise).
// test:///default through libvirtd gives every connection its own fresh state, so a
// test that reconnects, or inspects from a second connection, must use qemu:///system.
// Libvirt networks with DHCP need dnsmasq; their bridges are host-global, so each test
// network gets its own bridge name and a 198.18.0.0/15 subnet (reserved for benchmarks,
// routed nowhere) from DefineTestNetwork.
//
// # Outages, TLS and leftovers
//
// Kill stops the daemon and leaves its domains running; Restart starts it again on the
// same socket and state (it adopts the running domains), for tests of a provider riding
// out an outage. Options.TLS makes it listen for qemu+tls on a free loopback port with
// the given CA and server certificate, requiring client certificates of that CA.
//
// A test binary killed by its timeout never stops its daemon, and the network that
// daemon made keeps its bridge, dnsmasq, firewall rules and subnet. So each daemon
// directory records its test process, and Start first reaps the directories whose
// process is gone: it starts a daemon on the state left behind and stops it, which
// destroys the networks and domains the way libvirt does. DefineTestNetwork draws a
// random bridge and subnet, and draws again when libvirt finds them taken, which keeps
// concurrent runs and test packages apart.
//
// Tests call Require first: without root or the binaries, a test is skipped, or fails
// when the environment variable CI is "true".
package libvirtd
