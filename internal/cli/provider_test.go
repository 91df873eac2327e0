package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// TestProviderFlagsScopeTheProvider: --namespace, --watch-filter and --provider-selector
// reach the provider's Config, and each watch scope and shard elects its own leader
// under a valid Lease name.
func TestProviderFlagsScopeTheProvider(t *testing.T) {
	for _, tc := range []struct {
		args                             []string
		namespace, watchFilter, selector string
		leaderID                         string
	}{
		{nil, "", "", "", "banlieue-provider-vsphere.banlieue.io"},
		{[]string{"--namespace", "team-a"}, "team-a", "", "", "banlieue-provider-vsphere-ns-team-a.banlieue.io"},
		{[]string{"--watch-filter", "Blue_1"}, "", "Blue_1", "", "banlieue-provider-vsphere-wf-blue-1.banlieue.io"},
		{[]string{"--namespace", "team-a", "--watch-filter", "blue"}, "team-a", "blue", "", "banlieue-provider-vsphere-ns-team-a-wf-blue.banlieue.io"},
		// Each shard elects its own leader.
		{[]string{"--provider-selector", "site=dc1"}, "", "", "site=dc1", "banlieue-provider-vsphere-ps-" +
			strings.TrimPrefix(providersdk.ShardLeaseName("vsphere", "site=dc1"), "banlieue-shard-vsphere-") + ".banlieue.io"},
	} {
		cmd := newProviderCommand()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		ns, _ := cmd.Flags().GetString("namespace")
		wf, _ := cmd.Flags().GetString("watch-filter")
		ps, _ := cmd.Flags().GetString("provider-selector")
		pf := providerFlags{namespace: ns, watchFilter: wf, providerSelector: ps}
		cfg := pf.config("vsphere")
		if cfg.Namespace != tc.namespace || cfg.WatchFilter != tc.watchFilter || cfg.ProviderSelector != tc.selector {
			t.Errorf("%v: Config namespace %q, watch filter %q; want %q, %q", tc.args, cfg.Namespace, cfg.WatchFilter, tc.namespace, tc.watchFilter)
		}
		id := pf.leaderID("vsphere")
		if id != tc.leaderID {
			t.Errorf("%v: leader ID %q, want %q", tc.args, id, tc.leaderID)
		}
		if errs := validation.IsDNS1123Subdomain(id); len(errs) != 0 {
			t.Errorf("%v: leader ID %q is no Lease name: %v", tc.args, id, errs)
		}
	}
}

// TestWorkersFlagSetsHowManyMachinesAreReconciledAtOnce: every built-in provider
// reconciles the SDK's DefaultWorkers machines at once, and --workers overrides it.
func TestWorkersFlagSetsHowManyMachinesAreReconciledAtOnce(t *testing.T) {
	for _, tc := range []struct {
		class   string
		args    []string
		workers int
	}{
		{"vsphere", nil, providersdk.DefaultWorkers},
		{"vsphere", []string{"--workers", "30"}, 30},
		{"proxmox", nil, providersdk.DefaultWorkers},
		{"proxmox", []string{"--workers", "4"}, 4},
		{"libvirt", nil, providersdk.DefaultWorkers},
	} {
		cmd := newProviderCommand()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		n, _ := cmd.Flags().GetInt("workers")
		pf := providerFlags{workers: n}
		cfg := pf.config(tc.class)
		r := providersdk.NewReconciler(nil, cfg.MachineKind, cfg.Driver, cfg.MachineOptions...)
		if got := r.Workers(); got != tc.workers {
			t.Errorf("%s %v: %d workers, want %d", tc.class, tc.args, got, tc.workers)
		}
	}
}
