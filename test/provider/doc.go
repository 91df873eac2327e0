// Package provider is banlieue's test-only provider: a providersdk.Driver whose backend
// is an in-memory map of VMs keyed by machine UID, so that the core controller and the
// provider SDK can be tested end to end through the machine contract without a real
// backend. It is never shipped.
package provider
