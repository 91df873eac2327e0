// Command govc is govmomi's vSphere CLI, govc, with the commands banlieue's tests ask
// of it: its main is these lines, every command is govmomi's own (its cli packages).
// The tests build it from the module govmomi banlieue already requires, so that the
// witness of the vSphere tests is a client banlieue did not write.
package main

import (
	"os"

	"github.com/vmware/govmomi/cli"
	_ "github.com/vmware/govmomi/cli/about"
	_ "github.com/vmware/govmomi/cli/object"
	_ "github.com/vmware/govmomi/cli/version"
	_ "github.com/vmware/govmomi/cli/vm"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
