// Package wiring assembles banlieue's processes: the scheme every manager uses and the
// one place the core controller is registered, shared by the production commands
// (internal/cli) and the development ones (internal/cli/devcmd), so that 'banlieue dev'
// runs exactly the controllers a cluster runs.
package wiring

import (
	"cmp"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/pkg/sharding"
)

// Scheme returns a scheme with Kubernetes' built-in types and banlieue's APIs.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, banlieuev1.AddToScheme, infrav1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build the scheme: %w", err)
		}
	}
	return s, nil
}

// DefaultCoreWorkers is how many VirtualMachines the core controller reconciles at once
// by default. A reconcile spends its time waiting on the API server, not computing, so
// more workers write more each second: with 30 instead of 10, 3,000 VMs were Ready in
// 0.88 of the time and 1,000 on vcsim in 0.89 (docs/performance.md).
const DefaultCoreWorkers = 30

// Core is how the core controller runs.
type Core struct {
	// Events is which Events it records.
	Events virtualmachine.EventPolicy
	// Shard is the namespaces it serves (registered with the manager); every namespace
	// when nil.
	Shard *virtualmachine.Shard
	// Workers is how many VirtualMachines it reconciles at once; DefaultCoreWorkers when 0.
	Workers int
}

// SetupCore registers the core controller with mgr, run as c says. Give the Reconciler
// any new dependency (a Recorder, options) here.
func SetupCore(ctx context.Context, mgr ctrl.Manager, c Core) error {
	events, shard := c.Events, c.Shard
	if shard != nil {
		// Uncached: the shards' Leases are few and listed at most every
		// sharding.DefaultListTTL.
		shard.Registry().Bind(mgr.GetAPIReader(), mgr.GetClient(), sharding.DefaultListTTL)
		if err := mgr.Add(shard.Registry()); err != nil {
			return fmt.Errorf("failed to register the core shard: %w", err)
		}
	}
	if err := (&virtualmachine.Reconciler{Client: mgr.GetClient(), Events: events, Shard: shard}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: cmp.Or(c.Workers, DefaultCoreWorkers)}); err != nil {
		return fmt.Errorf("failed to set up the VirtualMachine controller: %w", err)
	}
	return nil
}
