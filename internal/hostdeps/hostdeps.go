// Package hostdeps is how a test asks for what hack/deps.sh installs from Debian
// (libvirtd and QEMU, python3-proxmoxer, …). Without it the test is skipped on a
// developer's machine, but in CI (CI=true) every such dependency must be there, so
// its absence fails the test rather than hiding it.
package hostdeps

import (
	"os"
	"testing"
)

// Require skips tb, or fails it when the environment variable CI is "true", if
// missing is not empty; missing says what is absent and how to get it.
func Require(tb testing.TB, missing string) {
	tb.Helper()
	switch {
	case missing == "":
	case os.Getenv("CI") == "true":
		tb.Fatal(missing)
	default:
		tb.Skip(missing)
	}
}
