// Package proxmoxsim is a Proxmox VE API simulator: an HTTPS server on loopback that
// answers the parts of the PVE REST API (api2/json) a VM control plane uses, the way a
// real PVE cluster answers them, so that banlieue's Proxmox provider, 'banlieue dev' and
// 'banlieue sim proxmox' can run against it with github.com/luthermonson/go-proxmox
// unchanged, as govmomi's vcsim stands in for a vCenter.
//
// It models one cluster reached through its first node: nodes that go offline,
// storages with content types and per-node volumes, bridges, pools, VMID allocation,
// QEMU VMs and templates with their config keys, full and linked clones, disk
// resize, power operations, a guest agent that reports addresses a while after
// start, storage uploads and downloads, API-token and ticket authentication, and
// asynchronous tasks with real UPIDs, logs and locks. Task durations, task failures
// and node outages are knobs for tests.
//
// Its answers copy real PVE where clients depend on it: every success is {"data": …};
// an error's text is the HTTP reason phrase and the connection closes after it; 401
// has an empty body; unknown paths answer 501; a request for an offline node answers
// 595; booleans are 0/1 and some numbers are strings. Where the simulator is simpler
// than PVE, the difference is written down next to the code that makes it.
package proxmoxsim
