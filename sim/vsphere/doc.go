// Package vspheresim runs vcsim, govmomi's vCenter simulator, the way banlieue's tests,
// 'banlieue dev' and 'banlieue sim vsphere' use it: in process, over TLS on loopback
// with a certificate from a CA of its own, behind a fault proxy that can take it off
// the network, with VM templates to clone from and simulated guests that report an
// IPv4 address soon after power-on, as VMware Tools do.
//
// Some of vcsim's knobs (simulator.TaskDelay) are process-wide, so whoever turns them
// affects every simulator in the process.
package vspheresim
