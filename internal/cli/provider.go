package cli

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
)

// providerFlags are the flags of the built-in providers that take any, and the
// Cluster API contract's --namespace and --watch-filter.
type providerFlags struct {
	proxmoxSnippetsDir     string
	namespace, watchFilter string
	orphanScanInterval     time.Duration
	// workers is how many machines are reconciled at once; the SDK's default when 0.
	workers int
	// providerSelector and shardNamespace make the process one provider shard.
	providerSelector, shardNamespace string
}

// config returns the provider's Config with the flags' watch scope.
func (f *providerFlags) config(class string) providersdk.Config {
	cfg := builtinProviders(f)[class]()
	cfg.Namespace, cfg.WatchFilter = f.namespace, f.watchFilter
	cfg.OrphanScanInterval = f.orphanScanInterval
	if f.workers > 0 {
		cfg.MachineOptions = append(cfg.MachineOptions, providersdk.WithWorkers(f.workers))
	}
	cfg.ProviderSelector, cfg.ShardNamespace = f.providerSelector, cmp.Or(f.shardNamespace, podNamespace())
	return cfg
}

// serviceAccountNamespace is where Kubernetes tells a pod its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// podNamespace is the namespace of the pod the process runs in, as leader election
// finds it; "" outside a pod.
func podNamespace() string {
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// leaderID is the provider's leader-election ID: one per class and watch scope, so that
// processes that reconcile different namespaces or watch filters each elect their own
// leader instead of waiting for one another.
func (f *providerFlags) leaderID(class string) string {
	id := "banlieue-provider-" + class
	if f.namespace != "" {
		id += "-ns-" + f.namespace
	}
	if f.watchFilter != "" {
		// A label value may hold capitals and '_', which a Lease name may not; filters
		// that differ only so share a leader.
		id += "-wf-" + providersdk.DNSLabel(f.watchFilter, "filter")
	}
	if f.providerSelector != "" {
		// Each shard elects its own leader; the hash is its registration Lease's.
		id += "-ps-" + strings.TrimPrefix(providersdk.ShardLeaseName(class, f.providerSelector), "banlieue-shard-"+class+"-")
	}
	return id + ".banlieue.io"
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
			config := pf.config(args[0])
			mgr, err := mf.newManager(pf.leaderID(args[0]), config.CacheOptions)
			if err != nil {
				return err
			}
			if err := providersdk.Setup(mgr, config); err != nil {
				return fmt.Errorf("failed to set up the %s provider: %w", args[0], err)
			}
			return mgr.Start(cmd.Context())
		},
	}
	mf.bind(cmd.Flags())
	cmd.Flags().StringVar(&pf.namespace, "namespace", "", "Reconcile only the machines of this namespace (Cluster API's --namespace); all namespaces when empty. "+
		"Cluster API Machines and Clusters, and user-data Secrets, are then read in it alone; Providers (and their credentials Secrets, in the Providers' namespaces) "+
		"stay readable in every namespace, as do machines, so that a Provider being deleted waits for the machines of every namespace")
	cmd.Flags().StringVar(&pf.watchFilter, "watch-filter", "", "Reconcile only the machines labelled "+providersdk.WatchFilterLabel+"=<value>, and act only on the Cluster API Machines and Clusters labelled so "+
		"(Cluster API's --watch-filter); none when empty")
	cmd.Flags().StringVar(&pf.providerSelector, "provider-selector", "", "Serve only the Providers of the class whose labels match this label selector "+
		"(e.g. site=dc1), with their machines and images: one provider shard. A Provider the selectors of two running shards match is served by neither "+
		"and says so (Ready=False, ShardConflict). All the class's Providers when empty")
	cmd.Flags().StringVar(&pf.shardNamespace, "shard-namespace", "", "Namespace of the Lease that registers this provider shard; the pod's own, or "+
		providersdk.DefaultShardNamespace+" outside a pod, when empty")
	cmd.Flags().DurationVar(&pf.orphanScanInterval, "orphan-scan-interval", 10*time.Minute, "How often, at most, each Provider's backend is scanned for orphaned VMs "+
		"(status.orphans; spec.orphanPolicy Delete deletes those two scans in a row find)")
	cmd.Flags().IntVar(&pf.workers, "workers", 0, fmt.Sprintf("How many machines to reconcile at once; %d when 0. A machine reconcile waits on the backend and the API server, ", providersdk.DefaultWorkers)+
		"so a backend that takes many calls at once (a vCenter, a Proxmox VE cluster) makes its VMs sooner with more")
	cmd.Flags().StringVar(&pf.proxmoxSnippetsDir, "proxmox-snippets-dir", "", "proxmox: where the nodes' snippets storages are mounted (<dir>/<storage>/snippets), to pass user-data as cicustom snippets instead of uploaded seed ISOs")
	return cmd
}
