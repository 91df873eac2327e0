package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/internal/devenv"
)

func newDevCommand() *cobra.Command {
	o := devenv.Options{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local control plane with banlieue, ready for kubectl apply",
		Long: "dev starts etcd and kube-apiserver from the envtest assets, installs banlieue's CRDs,\n" +
			"runs the core controller and writes an admin kubeconfig to <dir>/kubeconfig.\n" +
			"Ctrl-C stops everything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			start := time.Now()
			env, err := devenv.Start(o)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, env.Stop()) }()

			scheme, err := newScheme()
			if err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
			if err != nil {
				return fmt.Errorf("failed to create the manager: %w", err)
			}
			if err := setupCore(cmd.Context(), mgr); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() { done <- mgr.Start(cmd.Context()) }()
			if !mgr.GetCache().WaitForCacheSync(cmd.Context()) {
				return errors.Join(errors.New("the controller's cache did not sync"), <-done)
			}
			fmt.Printf("banlieue dev: ready in %s\n\nNext:\n  export KUBECONFIG=%s\n  alias kubectl=%s\n  kubectl apply -f examples/\n  kubectl get banlieue\n\nCtrl-C stops everything.\n",
				time.Since(start).Round(100*time.Millisecond), env.Kubeconfig, env.Kubectl)
			return <-done
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "Folder with etcd, kube-apiserver and kubectl (make envtest-assets prints it)")
	f.StringSliceVar(&o.CRDs, "crds", []string{"config/crd/bases"}, "Folders of CRDs to install")
	f.StringVar(&o.Dir, "dir", ".banlieue/dev", "Folder to write the kubeconfig to")
	return cmd
}
