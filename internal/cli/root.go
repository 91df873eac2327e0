package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Execute runs the banlieue command and returns the process exit code.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "banlieue:", err)
		return 1
	}
	return 0
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "banlieue",
		Short:         "A Kubernetes-native control plane for virtual machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	zapOpts := &zap.Options{}
	fs := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(fs)
	root.PersistentFlags().AddGoFlagSet(fs)
	root.PersistentPreRun = func(*cobra.Command, []string) {
		ctrl.SetLogger(zap.New(zap.UseFlagOptions(zapOpts)))
		setGoMemoryLimit(ctrl.Log.WithName("memlimit"))
	}
	root.AddCommand(newControllerCommand(), newProviderCommand(), newAdoptCommand())
	root.AddCommand(devCommands()...)
	return root
}
