// Package provider is banlieue's test-only provider: it fulfils TestMachines instantly,
// with no backend, so that the core controller can be tested end to end through the
// machine contract before any real backend exists. It is never shipped.
package provider
