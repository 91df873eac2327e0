// Package drivertest is the provider SDK's conformance kit: a table of behaviours every
// driver must show against its real backend (a simulator or daemon its test starts),
// run with Run from a driver's own test. It drives the driver the way the SDK's
// Reconciler does — Observe, then Create, Update or Delete with that observation,
// tasks recorded and polled — and checks the backend from outside the driver: no
// second VM after a repeated or interrupted create, nothing left after a delete,
// nothing changed by an observe, a VM of another identity never touched, and the typed
// errors (Unreachable, Unauthorized, Permanent, in flight) the Reconciler decides by,
// and, for a driver that is a Releaser, a released VM left as it was, unmarked.
//
// A third-party driver passes the same table before it ships:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Backend{Driver: NewDriver(), Provider: ..., ...})
//	}
package drivertest
