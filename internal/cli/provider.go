package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
)

// providerFlags are the flags of the built-in providers that take any.
type providerFlags struct {
	proxmoxSnippetsDir string
}

// builtinProviders are the provider classes the banlieue binary serves. They are wired
// here, explicitly; a third-party provider builds its own binary on providersdk.Setup.
func builtinProviders(f *providerFlags) map[string]func() providersdk.Config {
	return map[string]func() providersdk.Config{
		vsphere.ProviderClass: func() providersdk.Config { return vsphere.Config() },
		libvirt.ProviderClass: func() providersdk.Config { return libvirt.Config() },
		proxmox.ProviderClass: func() providersdk.Config {
			var opts []proxmox.Option
			if f.proxmoxSnippetsDir != "" {
				opts = append(opts, proxmox.WithSnippetWriter(proxmox.DirSnippetWriter(f.proxmoxSnippetsDir)))
			}
			return proxmox.Config(opts...)
		},
	}
}

func newProviderCommand() *cobra.Command {
	var (
		mf managerFlags
		pf providerFlags
	)
	classes := slices.Sorted(maps.Keys(builtinProviders(&pf)))
	cmd := &cobra.Command{
		Use:       "provider <class>",
		Short:     "Run a provider controller: turn one class's infrastructure machines into backend VMs",
		Long:      "provider runs the controller of one provider class (" + strings.Join(classes, ", ") + "): it claims the\nProviders of that class, reads their inventory, resolves images and reconciles their machines.",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: classes,
		RunE: func(cmd *cobra.Command, args []string) error {
			config := builtinProviders(&pf)[args[0]]
			mgr, err := mf.newManager("banlieue-provider-" + args[0] + ".banlieue.io")
			if err != nil {
				return err
			}
			if err := providersdk.Setup(mgr, config()); err != nil {
				return fmt.Errorf("failed to set up the %s provider: %w", args[0], err)
			}
			return mgr.Start(cmd.Context())
		},
	}
	mf.bind(cmd.Flags())
	cmd.Flags().StringVar(&pf.proxmoxSnippetsDir, "proxmox-snippets-dir", "", "proxmox: where the nodes' snippets storages are mounted (<dir>/<storage>/snippets), to pass user-data as cicustom snippets instead of uploaded seed ISOs")
	return cmd
}
