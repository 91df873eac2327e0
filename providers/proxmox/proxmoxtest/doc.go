// Package proxmoxtest starts the project's Proxmox VE API simulator (package
// proxmoxsim) for one test: in the test's process, serving HTTPS on loopback with a
// certificate from its own CA, with two nodes (pve1, pve2), storages local and
// local-lvm, bridge vmbr0 and a template. Tests of the Proxmox driver and the envtest
// suites that drive it use it.
//
// The simulator is one per test; its state lives in memory and goes with the test.
package proxmoxtest
