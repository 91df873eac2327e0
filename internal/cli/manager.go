package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/banlieue/banlieue/internal/wiring"
	"github.com/banlieue/banlieue/pkg/intern"
)

// managerFlags are the flags every long-running banlieue controller process takes.
type managerFlags struct {
	kubeconfig, metricsAddr, probeAddr, pprofAddr, leaderNamespace string
	leaderElect                                                    bool
}

func (m *managerFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&m.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster or $KUBECONFIG when empty")
	f.StringVar(&m.metricsAddr, "metrics-bind-address", ":8080", `Address of the metrics endpoint; "0" turns it off`)
	f.StringVar(&m.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints")
	f.StringVar(&m.pprofAddr, "pprof-bind-address", "0", `Address of Go's /debug/pprof endpoints (heap and CPU profiles); "0", the default, turns them off`)
	f.BoolVar(&m.leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time")
	f.StringVar(&m.leaderNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; the pod's own when empty")
}

// newManager returns a manager with banlieue's scheme, the flags' endpoints, leader
// election under leaderID and the health checks. restrict, when given, changes the
// cache's options (a provider's --namespace).
func (m *managerFlags) newManager(leaderID string, restrict ...func(cache.Options) cache.Options) (ctrl.Manager, error) {
	cfg, err := restConfig(m.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig: %w", err)
	}
	scheme, err := wiring.Scheme()
	if err != nil {
		return nil, err
	}
	// No controller reads managedFields, and at thousands of VMs and machines they are a
	// large part of what the cache holds; the strings left repeat from object to object.
	cacheOpts := cache.Options{DefaultTransform: intern.Transform()}
	for _, r := range restrict {
		cacheOpts = r(cacheOpts)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: m.metricsAddr},
		HealthProbeBindAddress:  m.probeAddr,
		PprofBindAddress:        m.pprofAddr,
		LeaderElection:          m.leaderElect,
		LeaderElectionID:        leaderID,
		LeaderElectionNamespace: m.leaderNamespace,
		// The process exits as soon as the manager stops, so hand the Lease over at
		// once instead of making the next replica wait for it to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the manager: %w", err)
	}
	if err := addHealthChecks(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// addHealthChecks adds the /healthz and /readyz checks.
func addHealthChecks(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the readiness check: %w", err)
	}
	return nil
}

// restConfig loads the kubeconfig at path, or when path is empty the usual chain:
// $KUBECONFIG, the in-cluster service account, ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return ctrl.GetConfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	// As ctrl.GetConfig does: no client-side rate limit (client-go's default is 5 requests
	// a second), the API server's priority and fairness does that job.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	return cfg, nil
}
