package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/internal/wiring"
)

func newControllerCommand() *cobra.Command {
	var (
		mf     managerFlags
		events string
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the core controller: place VirtualMachines and create their infrastructure machines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			policy, err := virtualmachine.ParseEventPolicy(events)
			if err != nil {
				return fmt.Errorf("--events: %w", err)
			}
			mgr, err := mf.newManager("banlieue-controller.banlieue.io")
			if err != nil {
				return err
			}
			if err := wiring.SetupCore(cmd.Context(), mgr, policy); err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	mf.bind(cmd.Flags())
	cmd.Flags().StringVar(&events, "events", string(virtualmachine.EventsTransitions),
		"Which Events to record on VirtualMachines: all (every lifecycle step: placement, machine created and deleted, its progress), "+
			"transitions (phase changes, Warnings, resizes, restarts, migrations, releases: one Event from creation to Running) or none; each Event is one API write")
	return cmd
}
