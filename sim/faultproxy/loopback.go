package faultproxy

import (
	"fmt"
	"net"
	"net/netip"
)

// LoopbackHost reads the host of addr and refuses any but a loopback one. Every
// simulator listens through a Proxy and accepts fixed, printed credentials, so none may
// be reachable from other machines; a simulator calls it first, before it makes a
// certificate for the host, and Start checks it again.
func LoopbackHost(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("failed to read the simulator's address %q: %w", addr, err)
	}
	if host == "localhost" {
		return host, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return host, nil
	}
	return "", fmt.Errorf("the simulator serves only on loopback (127.0.0.1, ::1 or localhost), not on %q: "+
		"its credentials are fixed and printed, so other machines must not reach it", addr)
}
