// Package host is the libvirt provider's service layer: every call to a libvirtd, made
// with go-libvirt (libvirt's RPC protocol in pure Go) and libvirtxml, and nothing else.
//
// A Client is one connection to a libvirtd (local socket, SSH or TLS), dialled again when
// it drops; each call is bounded by its context (go-libvirt's calls take none, so the
// connection is closed when the context ends), counted in providersdk.BackendCalls, and
// its errors are the SDK's typed errors: Unreachable, Unauthorized, or a NotFoundError
// (IsNotFound) for a domain, pool or volume that does not exist.
//
// What the Client returns is plain data (Domain, Volume, Capabilities, Targets), and what
// it defines is described the same way (DomainSpec, VolumeSpec, Reshape): which names,
// pools, networks, sizes and power states a machine gets is the driver's policy, not
// this package's.
package host
