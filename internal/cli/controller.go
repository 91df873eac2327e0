package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func newControllerCommand() *cobra.Command {
	var (
		kubeconfig, metricsAddr, probeAddr, leaderNamespace string
		leaderElect                                         bool
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the core controller: place VirtualMachines and create their infrastructure machines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return fmt.Errorf("failed to load the kubeconfig: %w", err)
			}
			scheme, err := newScheme()
			if err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme:                  scheme,
				Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
				HealthProbeBindAddress:  probeAddr,
				LeaderElection:          leaderElect,
				LeaderElectionID:        "banlieue-controller.banlieue.io",
				LeaderElectionNamespace: leaderNamespace,
				// The process exits as soon as the manager stops, so hand the Lease over at
				// once instead of making the next replica wait for it to expire.
				LeaderElectionReleaseOnCancel: true,
			})
			if err != nil {
				return fmt.Errorf("failed to create the manager: %w", err)
			}
			if err := setupCore(cmd.Context(), mgr); err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty")
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8080", `Address of the metrics endpoint; "0" turns it off`)
	f.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints")
	f.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time")
	f.StringVar(&leaderNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; the pod's own when empty")
	return cmd
}

// restConfig loads the kubeconfig at path, or when path is empty the usual chain:
// $KUBECONFIG, the in-cluster service account, ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	return ctrl.GetConfig()
}
