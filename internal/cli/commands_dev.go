//go:build dev

package cli

import (
	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/internal/cli/devcmd"
)

// devCommands are the development build's subcommands, dev and sim, with their
// simulators: this build (-tags dev) links them.
func devCommands() []*cobra.Command { return devcmd.Commands() }
