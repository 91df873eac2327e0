//go:build !dev

package cli

import "github.com/spf13/cobra"

// devCommands are none in the production build: it carries no simulator. Build with
// -tags dev (make build) for 'banlieue dev' and 'banlieue sim'.
func devCommands() []*cobra.Command { return nil }
