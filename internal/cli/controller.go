package cli

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/internal/wiring"
	"github.com/banlieue/banlieue/pkg/sharding"
)

// coreShardFlags make a core instance one core shard.
type coreShardFlags struct {
	index, count        int
	selector, namespace string
	leaseDuration       time.Duration
}

// shard returns the core shard the flags describe, with its clients bound to mgr.
func (f *coreShardFlags) shard() (*virtualmachine.Shard, error) {
	timing := sharding.DefaultTiming
	if f.leaseDuration > 0 {
		timing = sharding.Timing{Renew: f.leaseDuration / 3, Duration: f.leaseDuration}
	}
	return virtualmachine.NewShard(f.index, f.count, f.selector, cmp.Or(f.namespace, podNamespace()), timing)
}

// leaderID is the core's leader-election ID: one per shard, so that the replicas of
// each shard elect their own leader; an unsharded core keeps the ID it always had.
func (f *coreShardFlags) leaderID() string {
	if f.count <= 1 && f.selector == "" {
		return "banlieue-controller.banlieue.io"
	}
	return strings.TrimPrefix(virtualmachine.CoreShardLeaseName(f.index, f.count, f.selector), "banlieue-core-") + ".banlieue-controller.banlieue.io"
}

func (f *coreShardFlags) bind(fs *pflag.FlagSet) {
	fs.IntVar(&f.count, "shard-count", 1, "Number of core shards: each serves the namespaces whose stable hash (FNV-1a of the name) modulo this is its --shard-index")
	fs.IntVar(&f.index, "shard-index", 0, "This core shard's index, from 0 to --shard-count − 1")
	fs.StringVar(&f.selector, "namespace-selector", "", "Serve only the namespaces whose labels match this label selector (e.g. tenant-group=a); all when empty. "+
		"A namespace that two running core shards claim is served by neither until one of them has stopped, so that no VM is acted on twice")
	fs.StringVar(&f.namespace, "shard-namespace", "", "Namespace of the Lease that registers this core shard; the pod's own, or "+
		sharding.DefaultNamespace+" outside a pod, when empty")
	fs.DurationVar(&f.leaseDuration, "shard-lease-duration", 0, "How long a core shard's registration lives after its last renewal (renewed every third of it); 90s when 0")
	_ = fs.MarkHidden("shard-lease-duration") // for tests that kill a shard and wait for its hand-off
}

func newControllerCommand() *cobra.Command {
	var (
		mf      managerFlags
		sf      coreShardFlags
		events  string
		workers int
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
			shard, err := sf.shard()
			if err != nil {
				return err
			}
			mgr, err := mf.newManager(sf.leaderID(), withTransform(shard.TrimOthers))
			if err != nil {
				return err
			}
			if err := wiring.SetupCore(cmd.Context(), mgr, wiring.Core{Events: policy, Shard: shard, Workers: workers}); err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	mf.bind(cmd.Flags())
	sf.bind(cmd.Flags())
	cmd.Flags().StringVar(&events, "events", string(virtualmachine.EventsTransitions),
		"Which Events to record on VirtualMachines: all (every lifecycle step: placement, machine created and deleted, its progress), "+
			"transitions (phase changes, Warnings, resizes, restarts, migrations, releases: one Event from creation to Running) or none; each Event is one API write")
	cmd.Flags().IntVar(&workers, "workers", wiring.DefaultCoreWorkers,
		"How many VirtualMachines to reconcile at once; a reconcile mostly waits on the API server")
	return cmd
}

// withTransform adds t to the cache's transforms, after those it has. The core controller
// trims its cache so: of the VMs of other shards' namespaces it keeps only what
// placement counts (Shard.TrimOthers; the caches of infrastructure machines, core's
// own, are trimmed so too). Only a process that runs core alone may: another controller
// sharing the cache could read those VMs whole.
func withTransform(t toolscache.TransformFunc) func(cache.Options) cache.Options {
	return func(opts cache.Options) cache.Options {
		before := opts.DefaultTransform
		opts.DefaultTransform = func(obj any) (any, error) {
			if before != nil {
				var err error
				if obj, err = before(obj); err != nil {
					return nil, err
				}
			}
			return t(obj)
		}
		return opts
	}
}
