// Package proxmoxsim is a Proxmox VE API simulator: an HTTPS server on loopback that
// answers the parts of the PVE REST API (api2/json) a VM control plane uses, the way a
// real PVE cluster answers them, so that banlieue's Proxmox provider, 'banlieue dev' and
// 'banlieue sim proxmox' can run against it with github.com/luthermonson/go-proxmox
// unchanged, as govmomi's vcsim stands in for a vCenter.
//
// It models one cluster reached through its first node: nodes that go offline and
// quorum, storages with content types and per-node volumes, bridges, pools, VMID
// allocation, QEMU VMs and templates with their config keys, full and linked clones
// with qemu-server's locks and VMID races, pending config changes and the CPU, memory,
// disk and NIC hotplug of running VMs (see pending.go), disk resize, power operations,
// a guest agent that reports addresses a while after start, storage uploads and
// downloads, API-token and ticket authentication with PVE's roles, ACLs and privilege
// checks, HA resources, cloud-init dumps, /cluster/resources as pvestatd fills it (new
// guests unnamed until the next report), and asynchronous tasks with real UPIDs, logs
// and locks. Task durations, task failures, node outages, the status interval and lock
// timeouts are knobs for tests. It serves only on loopback.
//
// Its answers copy real PVE 8.4 where clients depend on it: every success is
// {"data": …}; an error's first line is the HTTP reason phrase and its body
// {"data":null,"message":…} (with "errors" for a 400), as PVE 8.3 and later send; 401
// has an empty body and comes 3 seconds late; unknown paths answer 501; a request for
// an offline node answers 595; a call without a privilege answers 403 "Permission check
// failed (<path>, <privilege>)"; booleans are 0/1 and some numbers are strings. Where
// the simulator is simpler than PVE, the difference is written down next to the code
// that makes it, and in docs/providers/proxmox.md.
package proxmoxsim
