// Package pve is the Proxmox VE driver's service layer: a typed client of PVE's REST
// API over github.com/luthermonson/go-proxmox. Every API path the driver calls lives
// here and nowhere else, and it is the only package of the driver that imports
// go-proxmox.
//
// Its methods take and return plain values (Resource, Config, TaskStatus, Task, …);
// an object PVE does not have is an error for which IsNotFound is true; PVE's other
// failures are classified into the provider SDK's typed errors where a caller
// branches on them: a PVE that cannot be reached or whose certificate is not trusted
// is Unreachable, rejected credentials are Unauthorized, a missing privilege is
// Permanent. Everything else keeps PVE's message (Message reads it back).
//
// What to call, and when, is the driver's policy, in package proxmox: which VM is a
// machine's, what to change, how to allocate VMIDs. Every call is counted in
// banlieue_backend_calls_total under its method and path template, e.g.
// "GET /nodes/{node}/qemu/{vmid}/config".
package pve
