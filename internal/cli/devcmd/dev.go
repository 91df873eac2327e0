package devcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/internal/admission"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/internal/wiring"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

func newDevCommand() *cobra.Command {
	o := devenv.Options{}
	var guestImage string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local control plane with banlieue and simulated backends, ready for kubectl apply",
		Long: "dev starts etcd and kube-apiserver from the envtest assets, installs banlieue's CRDs\n" +
			"and admission policy, starts a simulated vCenter and Proxmox VE cluster, runs the core\n" +
			"controller and their providers, creates a Provider for each simulator\n" +
			"(infra/vcenter-dc1, infra/pve-edge) and writes an admin kubeconfig to\n" +
			"<dir>/kubeconfig. Ctrl-C stops everything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			start := time.Now()
			env, err := devenv.Start(o)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, env.Stop()) }()
			backends, err := devenv.StartBackends(guestImage)
			if err != nil {
				return err
			}
			defer backends.Stop()

			scheme, err := wiring.Scheme()
			if err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
			if err != nil {
				return fmt.Errorf("failed to create the manager: %w", err)
			}
			// A local playground shows every lifecycle step as an Event.
			if err := wiring.SetupCore(cmd.Context(), mgr, wiring.Core{Events: virtualmachine.EventsAll}); err != nil {
				return err
			}
			for _, config := range backends.ProviderConfigs() {
				if err := providersdk.Setup(mgr, config); err != nil {
					return fmt.Errorf("failed to set up the %s provider: %w", config.Class, err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- mgr.Start(cmd.Context()) }()
			if !mgr.GetCache().WaitForCacheSync(cmd.Context()) {
				return errors.Join(errors.New("the controllers' caches did not sync"), <-done)
			}
			if err := createAll(cmd.Context(), mgr.GetClient(), backends.Objects()); err != nil {
				return errors.Join(err, <-done)
			}
			libvirtLine := "  libvirt  left out: " + backends.LibvirtUnavailable
			if backends.Libvirt != nil {
				libvirtLine = "  libvirt  infra/kvm-dev (env=dev)      -> a private libvirtd at " + backends.Libvirt.QEMUURI()
				if backends.LibvirtGuest != "" {
					libvirtLine += "\n           its VMs boot a real Debian guest (TCG), from " + backends.LibvirtGuest
				} else {
					libvirtLine += "\n           its VMs are blank disks: 'make guest-image' builds a real guest (about 2 minutes), then make dev again"
				}
			}
			fmt.Printf("banlieue dev: ready in %s\n\n"+
				"Backends:\n  vsphere  infra/vcenter-dc1 (env=prod) -> simulated vCenter at %s\n  proxmox  infra/pve-edge (env=edge)   -> simulated Proxmox VE at %s\n%s\n\n"+
				"Next:\n  export KUBECONFIG=%s\n  alias kubectl=%s\n  kubectl apply -f examples/\n  kubectl get vm -w\n\nCtrl-C stops everything.\n",
				time.Since(start).Round(100*time.Millisecond), backends.VSphere.URL, backends.Proxmox.URL, libvirtLine, env.Kubeconfig, env.Kubectl)
			return <-done
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "Folder with etcd, kube-apiserver and kubectl (make envtest-assets prints it)")
	f.StringSliceVar(&o.CRDs, "crds", []string{"config/crd/bases"}, "Folders of CRDs to install")
	f.StringVar(&o.Admission, "admission", admission.Dir, "Folder of admission policies to install")
	f.StringVar(&o.Dir, "dir", ".banlieue/dev", "Folder to write the kubeconfig to")
	f.StringVar(&guestImage, "guest-image", os.Getenv("BANLIEUE_GUEST_IMAGE"), "Guest image for the libvirt host's VMs (make guest-image prints it); blank disks when empty")
	return cmd
}

// createAll creates objs, leaving any that exist already as they are.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %s %s: %w", strings.TrimPrefix(fmt.Sprintf("%T", o), "*"), client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}
