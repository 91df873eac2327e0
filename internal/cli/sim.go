package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/internal/devenv"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a backend simulator on loopback, to try banlieue without a datacenter",
	}
	cmd.AddCommand(newSimVSphereCommand())
	return cmd
}

func newSimVSphereCommand() *cobra.Command {
	var (
		o      vspheresim.Options
		caFile string
	)
	cmd := &cobra.Command{
		Use:   "vsphere",
		Short: "Run a simulated vCenter (govmomi's vcsim) over TLS, with templates and guests that report addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := vspheresim.Start(o)
			if err != nil {
				return err
			}
			defer s.Stop()
			if err := os.WriteFile(caFile, s.CACert, 0o644); err != nil {
				return fmt.Errorf("failed to write the CA certificate: %w", err)
			}
			manifest, err := devenv.Manifest(devenv.VSphereObjects(s)...)
			if err != nil {
				return err
			}
			fmt.Printf("vCenter simulator: %s\n  username: %s\n  password: %s\n  CA certificate: %s\n\n"+
				"A Secret and a Provider for it, in namespace %s (kubectl apply -f -):\n\n%s\nCtrl-C stops it.\n",
				s.URL, s.Username, s.Password, caFile, devenv.ProviderNamespace, manifest)
			<-cmd.Context().Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8989", "Address to serve on (loopback)")
	f.IntVar(&o.Clusters, "clusters", 2, "Compute clusters in datacenter DC0; each is a failure domain")
	f.IntVar(&o.HostsPerCluster, "hosts-per-cluster", 2, "ESXi hosts per cluster")
	f.StringSliceVar(&o.Templates, "templates", []string{"ubuntu-22.04-template"}, "VM templates to create")
	f.DurationVar(&o.GuestAddressDelay, "guest-address-delay", time.Second, "How long after power-on a guest reports its address; negative: never")
	f.StringVar(&o.Username, "username", vspheresim.DefaultUsername, "User name the simulator accepts")
	f.StringVar(&o.Password, "password", vspheresim.DefaultPassword, "Password the simulator accepts")
	f.StringVar(&caFile, "ca-file", "vcsim-ca.pem", "Where to write the PEM certificate to verify the simulator with (caBundle)")
	return cmd
}
