// Command scale measures banlieue with many VirtualMachines: it starts a real
// kube-apiserver and etcd, the simulated vCenter and Proxmox VE cluster (and a private
// libvirtd when one can run here), the core controller and one provider per backend as
// separate processes of the banlieue binary (or several shards of each, with
// -core-shards and -provider-shards), applies N VirtualMachines spread over the
// backends, and prints one Markdown report: time until all are Ready and until all are
// deleted, Kubernetes API requests and backend calls per VM, each controller's CPU time
// and peak memory, the writes and backend calls of a quiet minute after convergence, and
// the same creations made directly with each backend's client library, as a ratio.
//
// Run it with `make bench-scale` (N=1000), or:
//
//	KUBEBUILDER_ASSETS=$(bash hack/envtest.sh | tail -n 1) go run ./test/scale -n 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	vms        int
	libvirtMax int
	idle       time.Duration
	settle     time.Duration
	only       string
	timeout    time.Duration
	dir        string
	out        string
	// kubeconfigFlag passes --kubeconfig, which makes client-go limit each process to
	// its default 5 requests per second with a burst of 10.
	kubeconfigFlag bool
	// coreWorkers is core's --workers; the binary's default when 0.
	coreWorkers int
	// providerWorkers is each provider's --workers; the binary's default when 0.
	providerWorkers int
	// gomemlimit is each controller process's GOMEMLIMIT; none when empty.
	gomemlimit string
	// pprof saves each controller's heap profile to dir when all VMs are Ready.
	pprof bool
	// direct makes the same creations with the client libraries after the run, for the
	// ratio; at tens of thousands of VMs that doubles a run that says little more.
	direct bool
	// events is the core controller's --events; its default when empty.
	events string
	// coreShards is how many core processes divide the VMs by namespace (docs/scale-out.md);
	// 1 runs one unsharded core, as before shards existed.
	coreShards int
	// providerShards is how many Providers, each served by a provider process of its
	// own, the vSphere and the Proxmox VE backend are each split into; 1 keeps one.
	providerShards int
}

func main() {
	var o options
	flag.IntVar(&o.vms, "n", 1000, "Number of VirtualMachines to create")
	flag.IntVar(&o.libvirtMax, "libvirt-max", 30, "Most VMs that go to libvirt (defined PoweredOff: real QEMU processes cannot run by the thousand); vSphere and Proxmox VE share the rest")
	flag.DurationVar(&o.idle, "idle", time.Minute, "How long to watch the converged system for writes and backend calls")
	flag.DurationVar(&o.settle, "settle", 90*time.Second, "How long to wait after all are Ready before the quiet window, so that it measures the steady state: the SDK still looks at a guest without an address for about a minute after it starts")
	flag.StringVar(&o.events, "events", "", "The core controller's --events (all, transitions or none); the binary's default (transitions) when empty")
	flag.StringVar(&o.only, "only", "", "Put every VM on this backend (vsphere, proxmox or libvirt) instead of spreading them")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "Longest wait for all VMs to be Ready, and again to be deleted")
	flag.StringVar(&o.dir, "dir", "", "Folder for the binary, kubeconfigs and controller logs; a temporary one, kept, when empty")
	flag.StringVar(&o.out, "o", "", "Also write the report to this file")
	flag.BoolVar(&o.kubeconfigFlag, "kubeconfig-flag", false, "Pass each controller --kubeconfig instead of $KUBECONFIG; 'banlieue' then keeps client-go's default limit of 5 requests/s per process")
	flag.IntVar(&o.coreShards, "core-shards", 1, "Run this many core processes ('controller --shard-count K --shard-index i'), the VMs spread over max(16, 4K) namespaces; 1 runs one unsharded core")
	flag.IntVar(&o.providerShards, "provider-shards", 1, "Split the vSphere and the Proxmox VE backend each into this many Providers on its one simulator, each served by a provider process of its own ('--provider-selector'); libvirt keeps one")
	flag.BoolVar(&o.direct, "direct", true, "After the run, make the same creations with each backend's client library, for the ratio to the direct path")
	flag.IntVar(&o.coreWorkers, "core-workers", 0, "The core controller's --workers (VMs reconciled at once); the binary's default when 0")
	flag.IntVar(&o.providerWorkers, "provider-workers", 0, "Each provider's --workers (machines reconciled at once); the binary's default when 0")
	flag.StringVar(&o.gomemlimit, "gomemlimit", "", "Each controller process's GOMEMLIMIT (e.g. 100MiB, what the binary takes in a container limited to 150Mi: the limit less 50 MiB); none when empty")
	flag.BoolVar(&o.pprof, "pprof", false, "Save each controller's heap profile (<dir>/<name>.heap, for 'go tool pprof') when all VMs are Ready, and the harness's own CPU profile (simulators, watch) until then (<dir>/harness.cpu)")
	flag.Parse()
	for _, f := range []struct {
		name  string
		value int
	}{{"n", o.vms}, {"core-shards", o.coreShards}, {"provider-shards", o.providerShards}} {
		if f.value < 1 {
			fmt.Fprintf(os.Stderr, "scale: -%s must be at least 1\n", f.name)
			os.Exit(2)
		}
	}
	harnessGC()
	os.Exit(execute(o))
}

// harnessGCPercent is the harness's GOGC unless the environment sets one. The harness
// holds the simulated vCenter and Proxmox VE, which stand in for machines of their
// own, and its heap is large (every simulated VM, and the VMs it watches): at the
// default of 100 its collector took a quarter of its CPU at 10,000 VMs, on the cores
// the controllers are measured on. Memory is plentiful beside it.
const harnessGCPercent = 400

func harnessGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(harnessGCPercent)
	}
}

// harnessGOGC is the harness's GOGC, as the report states it.
func harnessGOGC() string {
	if v := os.Getenv("GOGC"); v != "" {
		return v
	}
	return strconv.Itoa(harnessGCPercent)
}

// execute runs the benchmark until it ends or a signal stops it, prints the report
// and returns the process's exit code.
func execute(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	fmt.Print(report)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(report), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			return 1
		}
	}
	return 0
}

// logf prints progress to stderr, so that stdout holds only the report.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
