// Command banlieue is banlieue's one binary: the core controller, the provider
// controllers, the all-in-one development control plane and the simulators.
package main

import (
	"os"

	"github.com/banlieue/banlieue/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
