package devcmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/internal/devenv"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
)

func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run a backend simulator on loopback, to try banlieue without a datacenter",
	}
	cmd.AddCommand(newSimVSphereCommand(), newSimProxmoxCommand())
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
			return serve(cmd, caFile, s.CACert, devenv.VSphereObjects(s),
				fmt.Sprintf("vCenter simulator: %s\n  username: %s\n  password: %s\n", s.URL, s.Username, s.Password))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8989", "Address to serve on: a loopback address (127.0.0.0/8, ::1 or localhost) and a port; others are refused")
	f.IntVar(&o.Clusters, "clusters", 2, "Compute clusters in datacenter DC0; each is a failure domain")
	f.IntVar(&o.HostsPerCluster, "hosts-per-cluster", 2, "ESXi hosts per cluster")
	f.StringSliceVar(&o.Templates, "templates", []string{"ubuntu-22.04-template"}, "VM templates to create")
	f.DurationVar(&o.GuestAddressDelay, "guest-address-delay", time.Second, "How long after power-on a guest reports its address; negative: never")
	f.StringVar(&o.Username, "username", vspheresim.DefaultUsername, "User name the simulator accepts")
	f.StringVar(&o.Password, "password", vspheresim.DefaultPassword, "Password the simulator accepts")
	f.StringVar(&caFile, "ca-file", "vcsim-ca.pem", "Where to write the PEM certificate to verify the simulator with (caBundle)")
	return cmd
}

func newSimProxmoxCommand() *cobra.Command {
	var (
		o      proxmoxsim.Options
		caFile string
	)
	cmd := &cobra.Command{
		Use:   "proxmox",
		Short: "Run a simulated Proxmox VE cluster over HTTPS, with a template and guest agents that report addresses",
		Long: "proxmox serves the Proxmox VE API (api2/json) of a simulated cluster: nodes, storages,\n" +
			"bridges, a template, QEMU VMs, tasks with UPIDs and guest agents, for banlieue's Proxmox\n" +
			"provider and go-proxmox. It prints an API token, writes its CA certificate, and prints a\n" +
			"Secret and a Provider for it. Every node has the storage local with iso content, to\n" +
			"which the provider uploads the NoCloud seed ISOs that carry user data, as on PVE.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.UnauthorizedDelay == 0 {
				o.UnauthorizedDelay = -1 // Options read 0 as PVE's 3s
			}
			s, err := proxmoxsim.Start(o)
			if err != nil {
				return err
			}
			defer s.Stop()
			return serve(cmd, caFile, s.CACert, devenv.ProxmoxObjects(s),
				fmt.Sprintf("Proxmox VE simulator: %s\n  API token: %s=%s\n  user: %s / %s\n", s.URL, s.TokenID, s.TokenSecret, s.Username, s.Password))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8006", "Address to serve on: a loopback address (127.0.0.0/8, ::1 or localhost) and a port; others are refused")
	f.StringSliceVar(&o.Nodes, "nodes", []string{"pve1", "pve2"}, "Node names; the first serves the API and holds the templates")
	f.StringSliceVar(&o.Bridges, "bridges", []string{"vmbr0", "vmbr1"}, "Linux bridges every node has")
	f.DurationVar(&o.GuestAgentDelay, "guest-agent-delay", time.Second, "How long after start a guest agent answers; negative: never")
	f.DurationVar(&o.TaskDelay, "task-delay", 200*time.Millisecond, "How long a task (clone, start, …) runs")
	f.DurationVar(&o.UnauthorizedDelay, "unauthorized-delay", 3*time.Second, "How long a 401 answer is held back, as Proxmox VE holds it 3s; 0 or negative: not at all")
	f.StringVar(&caFile, "ca-file", "pve-ca.pem", "Where to write the PEM certificate to verify the simulator with (caBundle)")
	return cmd
}

// serve writes a running simulator's CA certificate to caFile, prints how to reach it
// (banner, then the certificate's path and the Secret and Provider to apply) and waits
// until the command is cancelled (Ctrl-C).
func serve(cmd *cobra.Command, caFile string, ca []byte, objs []client.Object, banner string) error {
	if err := os.WriteFile(caFile, ca, 0o644); err != nil { //nolint:gosec // a CA certificate is public, and kubectl users read it
		return fmt.Errorf("failed to write the CA certificate: %w", err)
	}
	manifest, err := devenv.Manifest(objs...)
	if err != nil {
		return err
	}
	fmt.Printf("%s  CA certificate: %s\n\nA Secret and a Provider for it, in namespace %s (kubectl apply -f -):\n\n%s\nCtrl-C stops it.\n",
		banner, caFile, devenv.ProviderNamespace, manifest)
	<-cmd.Context().Done()
	return nil
}
