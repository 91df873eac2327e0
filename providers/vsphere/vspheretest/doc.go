// Package vspheretest starts a simulated vCenter (package vspheresim, on govmomi's
// vcsim) for one test: in the test's process, serving TLS on loopback with a
// certificate from its own CA, with a template to clone from. Tests of the vSphere
// driver and the envtest suites that drive it use it.
//
// The simulator is one per test; its state lives in memory and goes with the test. Some
// of vcsim's knobs (task delays) are process-wide, so tests that use them must not run
// in parallel with other simulator tests.
package vspheretest
