package devcmd

import "github.com/spf13/cobra"

// Commands returns the development build's subcommands: dev and sim.
func Commands() []*cobra.Command { return []*cobra.Command{newDevCommand(), newSimCommand()} }
