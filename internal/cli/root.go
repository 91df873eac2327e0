package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
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
	root.PersistentPreRun = func(*cobra.Command, []string) { ctrl.SetLogger(zap.New(zap.UseFlagOptions(zapOpts))) }
	root.AddCommand(newControllerCommand(), newProviderCommand(), newSimCommand(), newDevCommand())
	return root
}

// newScheme returns a scheme with Kubernetes' built-in types and banlieue's APIs.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, banlieuev1.AddToScheme, infrav1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build the scheme: %w", err)
		}
	}
	return s, nil
}

// setupCore registers the core controller with mgr. It is the one place the core
// controller is wired, shared by 'banlieue controller' and 'banlieue dev': give the
// Reconciler any new dependency (a Recorder, options) here.
func setupCore(ctx context.Context, mgr ctrl.Manager) error {
	if err := (&virtualmachine.Reconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 10}); err != nil {
		return fmt.Errorf("failed to set up the VirtualMachine controller: %w", err)
	}
	return nil
}
