package cli

import (
	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/internal/wiring"
)

func newControllerCommand() *cobra.Command {
	var mf managerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the core controller: place VirtualMachines and create their infrastructure machines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mgr, err := mf.newManager("banlieue-controller.banlieue.io")
			if err != nil {
				return err
			}
			if err := wiring.SetupCore(cmd.Context(), mgr); err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	mf.bind(cmd.Flags())
	return cmd
}
