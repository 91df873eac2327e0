package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/internal/wiring"
	"github.com/banlieue/banlieue/pkg/contract"
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
			mgr, err := mf.newManager("banlieue-controller.banlieue.io", trimMachines)
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

// trimMachines makes the core controller's cache hold of each infrastructure machine
// only what core reads (contract.Spec, contract.Status less status.task): at thousands of
// VMs, the backends' status blocks were most of core's memory. Only a process that runs
// core alone may: a provider reads the task and its block from the same cache.
func trimMachines(opts cache.Options) cache.Options {
	strip, trim := opts.DefaultTransform, contract.TrimStatus("task")
	opts.DefaultTransform = func(obj any) (any, error) {
		if strip != nil {
			var err error
			if obj, err = strip(obj); err != nil {
				return nil, err
			}
		}
		return trim(obj)
	}
	return opts
}
