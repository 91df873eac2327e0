package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/providers/libvirt"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

const (
	// namespace holds the measured VirtualMachines; with several core shards it is the
	// prefix of the namespaces that do (see vmNamespaces).
	namespace = "scale"
	// backendLabel on a VM names the backend it is meant for; its providerSelector
	// selects the dev Provider carrying the same label (or its copies, see
	// splitProviders).
	backendLabel = "backend"
	// className and imageName are the VMClass and VMImage every VM uses.
	className, imageName = "scale-tiny", "scale-image"
	// setUpTimeout bounds the wait for the Providers and the image to be ready.
	setUpTimeout = 2 * time.Minute
	// apiWorkers is how many VirtualMachines the harness creates or deletes at a time.
	apiWorkers = 16
)

// backend is one simulated backend, its provider processes and its share of the VMs.
type backend struct {
	class    string
	vms      int
	powerOff bool
	// shards are the provider processes that serve the backend: one, unless
	// -provider-shards splits it into several Providers (see splitProviders).
	shards []providerShard
	// direct creates n VMs with the backend's own client library.
	direct func(ctx context.Context, n int) error
}

// providerShard is one provider process and the Provider it serves.
type providerShard struct {
	proc *harness.Process
	// provider is the Provider's "namespace/name", as a VM's status.scheduled names it.
	provider string
}

// bench is one run: the control plane, the simulators, the controllers and what was
// measured.
type bench struct {
	o      options
	env    *testenv.Env
	sims   *devenv.Backends
	client client.Client
	// core are the core processes: one, or -core-shards shards.
	core     []*harness.Process
	backends []*backend
	tracker  *tracker
	// objects are the Providers, their Secrets and namespaces the run creates: the dev
	// environment's, its Providers split by -provider-shards.
	objects []client.Object
	// namespaces hold the VMs; coreShares is what each core shard serves of them, with
	// several.
	namespaces []string
	coreShares []coreShare

	// Snapshots before the creations, when all are Ready, once settled (the quiet
	// window starts), after the quiet window and when all are deleted.
	before, ready, settled, idle, deleted *snapshot
	readyAt, deletedAt                    time.Duration
	readyBy                               map[string]time.Duration // by backend class
	// latencies are the VMs' times from creation to Ready, by backend class and, under
	// "", all of them.
	latencies map[string][]time.Duration
	// placed counts the VMs placed on each Provider ("namespace/name") when all were
	// Ready.
	placed        map[string]int
	direct        time.Duration
	directByClass map[string]time.Duration
	directCPU     time.Duration // the harness's CPU time (the simulators) during the direct path
	machine       machine
	pprofAddrs    map[string]string // by process name, with -pprof
	directErr     error             // why the direct path failed

	// For the plot: when the first create was made, the series sampled from then until
	// all were deleted, the VMs' entries into and exits from Ready, when the deletions
	// started and when the sampling ended (since the first create), and the PNG
	// written, if any.
	createdFrom  time.Time
	samples      []sample
	readyChanges []readyChange
	deleteFrom   time.Duration
	sampledUntil time.Duration
	plotFile     string
}

func run(ctx context.Context, o options) (string, error) {
	var err error
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: run 'make bench-scale', or set it to the folder 'bash hack/envtest.sh | tail -n 1' prints")
	}
	b := &bench{o: o, machine: describeMachine(), namespaces: vmNamespaces(o.coreShards)}
	if b.o.dir == "" {
		if b.o.dir, err = os.MkdirTemp("", "banlieue-scale-"); err != nil {
			return "", err
		}
	} else if err := os.MkdirAll(b.o.dir, 0o750); err != nil {
		return "", err
	}
	logf("Building banlieue into %s (controller logs go there too)", b.o.dir)
	bin, err := harness.Build(b.o.dir)
	if err != nil {
		return "", err
	}
	logf("Starting kube-apiserver and etcd")
	if b.env, err = testenv.Start("config/crd/bases"); err != nil {
		return "", err
	}
	defer func() {
		if err := b.env.Stop(); err != nil {
			logf("Warning: %v", err)
		}
	}()
	if err := b.env.InstallAdmission(); err != nil {
		return "", err
	}
	logf("Starting the simulated backends")
	// Blank disks: the libvirt VMs of a scale run are defined powered off.
	if b.sims, err = devenv.StartBackends(""); err != nil {
		return "", err
	}
	// The dev vCenter's simulated guests report addresses through a standing property
	// filter, and vcsim deadlocks when such a filter races concurrent clones (see
	// docs/performance.md). Ready needs no address, so this run's guests report none.
	b.sims.VSphere.Stop()
	if b.sims.VSphere, err = vspheresim.Start(vspheresim.Options{Templates: []string{devenv.VSphereTemplate}, GuestAddressDelay: -1}); err != nil {
		b.sims.VSphere = nil
		b.stopBackends()
		return "", err
	}
	defer b.stopBackends()
	cfg := rest.CopyConfig(b.env.Config)
	// The harness plays a user applying manifests in bulk; the API server's priority
	// and fairness, not a client-side limiter, should pace it.
	cfg.QPS = -1
	if b.client, err = client.New(cfg, client.Options{Scheme: b.env.Scheme}); err != nil {
		return "", err
	}
	// Cancelled first when run returns: the VM watch ends before the API server stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Deferred before the start, so that when one process fails to start, those started
	// before it are stopped too.
	defer b.stopControllers()
	if err := b.startControllers(bin); err != nil {
		return "", err
	}
	if err := b.setUp(ctx); err != nil {
		return "", err
	}
	if b.tracker, err = startTracker(ctx, cfg, b.env.Scheme); err != nil {
		return "", err
	}
	if err := b.measure(ctx); err != nil {
		return "", err
	}
	b.plot()
	return b.report(), nil
}

// stopBackends stops the simulators, libvirtd first: a vcsim whose locks a panic
// leaked (see docs/performance.md) never finishes stopping, and must not keep libvirtd
// and its networks alive.
func (b *bench) stopBackends() {
	if b.sims.Libvirt != nil {
		b.sims.Libvirt.Stop()
	}
	b.sims.Proxmox.Stop()
	if b.sims.VSphere == nil {
		return
	}
	done := make(chan struct{})
	go func() { b.sims.VSphere.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		logf("Warning: the vCenter simulator did not stop within 30s")
	}
}

// startControllers starts the core controller, or its shards, and the provider
// processes of each backend, one per Provider that splitProviders made or one for all
// its Providers, each as its own process with its own API server user.
func (b *bench) startControllers(bin string) error {
	b.backends = []*backend{
		{class: vsphere.ProviderClass, direct: b.directVSphere},
		{class: proxmox.ProviderClass, direct: b.directProxmox},
	}
	if b.sims.Libvirt != nil {
		b.backends = append(b.backends, &backend{class: libvirt.ProviderClass, powerOff: true, direct: b.directLibvirt})
	} else {
		logf("Leaving libvirt out: %s", b.sims.LibvirtUnavailable)
	}
	b.spread()
	b.objects = splitProviders(b.sims.Objects(), b.o.providerShards, shardedClasses...)
	perNamespace := map[string]int{}
	for _, vm := range b.vms() {
		perNamespace[vm.Namespace]++
	}
	var err error
	if b.coreShares, err = coreShares(perNamespace, b.o.coreShards); err != nil {
		return err
	}
	core := []string{"controller"}
	if b.o.events != "" {
		core = append(core, "--events", b.o.events)
	}
	if b.o.coreWorkers > 0 {
		core = append(core, "--workers", strconv.Itoa(b.o.coreWorkers))
	}
	for i := range b.o.coreShards {
		name, args := coreProcess(i, b.o.coreShards, core)
		p, err := b.startController(bin, name, args)
		if err != nil {
			return err
		}
		b.core = append(b.core, p)
	}
	for _, be := range b.backends {
		// The dev environment has one Provider per backend, which a process without a
		// selector serves; splitProviders' copies each get a shard of their own.
		for _, p := range providersOf(b.objects, be.class) {
			name, args := providerProcess(p)
			if b.o.providerWorkers > 0 {
				args = append(args, "--workers", strconv.Itoa(b.o.providerWorkers))
			}
			proc, err := b.startController(bin, name, args)
			if err != nil {
				return err
			}
			be.shards = append(be.shards, providerShard{proc: proc, provider: client.ObjectKeyFromObject(p).String()})
		}
	}
	return nil
}

// startController starts one controller process as an API server user of its own,
// named banlieue-<name>. Its kubeconfig goes through $KUBECONFIG, which the process
// loads as it loads an in-cluster config, unless -kubeconfig-flag asks for --kubeconfig.
func (b *bench) startController(bin, name string, args []string) (*harness.Process, error) {
	kubeconfig, err := b.env.Kubeconfig(b.o.dir, "banlieue-"+name)
	if err != nil {
		return nil, err
	}
	// Appended to below; the caller's slice stays as it was.
	args = slices.Clone(args)
	if b.o.kubeconfigFlag {
		args = append(args, "--kubeconfig", kubeconfig)
	} else if err := os.Setenv("KUBECONFIG", kubeconfig); err != nil {
		return nil, err
	}
	if b.o.gomemlimit != "" {
		if err := os.Setenv("GOMEMLIMIT", b.o.gomemlimit); err != nil {
			return nil, err
		}
	}
	if b.o.pprof {
		port, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args = append(args, "--pprof-bind-address", addr)
		if b.pprofAddrs == nil {
			b.pprofAddrs = map[string]string{}
		}
		b.pprofAddrs[name] = addr
	}
	// The child inherits the environment as it is now.
	return harness.Start(bin, b.o.dir, name, args...)
}

func (b *bench) stopControllers() {
	for _, p := range b.processes() {
		_ = p.Stop(10 * time.Second)
	}
}

// processes are the measured controller processes, core first, then each backend's
// provider processes.
func (b *bench) processes() []*harness.Process {
	ps := slices.Clone(b.core)
	for _, be := range b.backends {
		for _, sh := range be.shards {
			ps = append(ps, sh.proc)
		}
	}
	return ps
}

// spread gives libvirt a bounded share (its VMs are real domains) and splits the rest
// between vSphere and Proxmox VE.
func (b *bench) spread() {
	if b.o.only != "" {
		for _, be := range b.backends {
			be.vms = cond(be.class == b.o.only, b.o.vms, 0)
		}
		return
	}
	rest := b.o.vms
	for _, be := range b.backends {
		if be.class == libvirt.ProviderClass {
			be.vms = min(b.o.vms/3, b.o.libvirtMax)
			rest -= be.vms
		}
	}
	b.backends[0].vms = rest - rest/2
	b.backends[1].vms = rest / 2
}

// setUp creates the dev Providers of the simulators (split by -provider-shards), the
// VMs' namespaces, class and image, and waits until every Provider is Ready and the
// image is ready on each. The dev objects include the namespace the shards register
// their Leases in.
func (b *bench) setUp(ctx context.Context) error {
	objs := slices.Clone(b.objects)
	for _, ns := range b.namespaces {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	objs = append(objs, devenv.Class(className, 1, 512), devenv.Image(imageName))
	var providers []client.ObjectKey
	for _, obj := range objs {
		if _, ok := obj.(*banlieuev1.Provider); ok {
			providers = append(providers, client.ObjectKeyFromObject(obj))
		}
		if err := b.env.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("failed to create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	logf("Waiting for %d Providers and the image to be ready", len(providers))
	ctx, cancel := context.WithTimeout(ctx, setUpTimeout)
	defer cancel()
	for {
		pending := b.notReady(ctx, providers)
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the setup was not ready within %s: %s", setUpTimeout, pending)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// notReady says which of the Providers, or the image, is not ready yet; "" when all are.
func (b *bench) notReady(ctx context.Context, providers []client.ObjectKey) string {
	for _, key := range providers {
		p := &banlieuev1.Provider{}
		if err := b.env.Client.Get(ctx, key, p); err != nil {
			return err.Error()
		}
		if !meta.IsStatusConditionTrue(p.Status.Conditions, banlieuev1.ReadyCondition) {
			return "Provider " + key.String() + " is not Ready"
		}
	}
	img := &banlieuev1.VMImage{}
	if err := b.env.Client.Get(ctx, client.ObjectKey{Name: imageName}, img); err != nil {
		return err.Error()
	}
	ready := 0
	for _, row := range img.Status.PerProvider {
		if ptr.Deref(row.Ready, false) {
			ready++
		}
	}
	if ready < len(providers) {
		return fmt.Sprintf("the image is ready on %d of %d Providers", ready, len(providers))
	}
	return ""
}

// measure creates the VMs, waits until all are Ready, watches the quiet system, deletes
// the VMs and waits until they are gone, then makes the same creations directly.
func (b *bench) measure(ctx context.Context) error {
	var err error
	if b.before, err = b.snapshot(ctx); err != nil {
		return err
	}
	logf("Creating %d VirtualMachines (%s)", b.o.vms, b.shares())
	start := time.Now()
	b.createdFrom = start
	rec := b.startRecording(ctx, start)
	// On an early return the sampling must end too; stop is idempotent.
	defer rec.stop()
	stopCPUProfile := b.startCPUProfile()
	defer stopCPUProfile()
	if err := b.eachVM(ctx, func(ctx context.Context, vm client.Object) error { return b.client.Create(ctx, vm) }); err != nil {
		return fmt.Errorf("failed to create the VMs: %w", err)
	}
	if err := b.tracker.waitFor(ctx, b.o.timeout, "Ready", func(t *tracker) int { return b.o.vms - t.readyCount() }); err != nil {
		return err
	}
	b.readyBy = b.tracker.lastReadyBy(start)
	for _, d := range b.readyBy {
		b.readyAt = max(b.readyAt, d)
	}
	b.latencies = b.tracker.latencies()
	b.placed = b.tracker.placements()
	if b.ready, err = b.snapshot(ctx); err != nil {
		return err
	}
	logf("All %d Ready in %s; watching the quiet system for %s", b.o.vms, b.readyAt.Round(time.Millisecond), b.o.idle)
	for _, p := range b.processes() {
		u := b.ready.usage[p.Name]
		logf("%s: %.1f CPU s, peak RSS %d MiB", p.Name, u.CPU.Seconds(), u.PeakRSS/mib)
	}
	stopCPUProfile()
	b.saveHeapProfiles(ctx)
	logf("Letting the system settle for %s", b.o.settle)
	if err := sleep(ctx, b.o.settle); err != nil {
		return err
	}
	if b.settled, err = b.snapshot(ctx); err != nil {
		return err
	}
	if err := sleep(ctx, b.o.idle); err != nil {
		return err
	}
	if b.idle, err = b.snapshot(ctx); err != nil {
		return err
	}
	logf("Deleting the VirtualMachines")
	deleteStart := time.Now()
	b.deleteFrom = deleteStart.Sub(start)
	// One by one, as kubectl does: a DELETECOLLECTION of thousands of objects outlasts
	// the API server's request timeout.
	if err := b.eachVM(ctx, func(ctx context.Context, vm client.Object) error { return b.client.Delete(ctx, vm) }); err != nil {
		return fmt.Errorf("failed to delete the VMs: %w", err)
	}
	// Counted by the API server, every second, not by the watch (see stamp): the last
	// count is the time.
	left, asked := b.o.vms, time.Time{}
	if err := b.tracker.waitFor(ctx, b.o.timeout, "deleted", func(*tracker) int {
		if time.Since(asked) >= time.Second {
			asked = time.Now()
			if n, err := b.countVMs(ctx); err == nil {
				left, b.deletedAt = n, time.Since(deleteStart)
			}
		}
		return left
	}); err != nil {
		return err
	}
	b.samples = rec.stop()
	b.sampledUntil = time.Since(start)
	b.readyChanges = b.tracker.readyChanges()
	if b.deleted, err = b.snapshot(ctx); err != nil {
		return err
	}
	if !b.o.direct {
		logf("All deleted in %s; not measuring the direct path (-direct=false)", b.deletedAt.Round(time.Millisecond))
		b.directErr = errDirectSkipped
		return ctx.Err()
	}
	logf("All deleted in %s; creating the same VMs directly with the client libraries", b.deletedAt.Round(time.Millisecond))
	// banlieue's figures stand without the comparison: a failed direct path is reported,
	// not allowed to lose the run.
	if b.directErr = b.measureDirect(ctx); b.directErr != nil {
		logf("Warning: the direct path failed; the report has no ratio: %v", b.directErr)
	}
	return ctx.Err()
}

// errDirectSkipped is the direct path of a run with -direct=false.
var errDirectSkipped = errors.New("not run (-direct=false)")

// shares lists how many VMs each backend gets.
func (b *bench) shares() string {
	var parts []string
	for _, be := range b.backends {
		if be.vms > 0 {
			parts = append(parts, fmt.Sprintf("%s %d%s", be.class, be.vms, cond(be.powerOff, " PoweredOff", "")))
		}
	}
	return strings.Join(parts, ", ")
}

// vms are the VirtualMachines to create, the backends taking turns, in the namespaces
// assignNamespaces gives them.
func (b *bench) vms() []*banlieuev1.VirtualMachine {
	backends := b.interleaved()
	namespaces := assignNamespaces(backends, b.namespaces)
	vms := make([]*banlieuev1.VirtualMachine, 0, len(backends))
	for i, be := range backends {
		vm := builder.VirtualMachine(namespaces[i], fmt.Sprintf("vm-%05d", i), className, imageName, builder.WithProviderSelector(map[string]string{backendLabel: be.class}))
		vm.Labels = map[string]string{backendLabel: be.class}
		if be.powerOff {
			vm.Spec.DesiredPowerState = banlieuev1.PowerStatePoweredOff
		}
		vms = append(vms, vm)
	}
	return vms
}

// eachVM calls f for every VM, apiWorkers at a time, as a user's pipeline applying
// or deleting manifests in parallel would.
func (b *bench) eachVM(ctx context.Context, f func(context.Context, client.Object) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(apiWorkers)
	for _, vm := range b.vms() {
		g.Go(func() error {
			if err := f(ctx, vm); err != nil {
				return fmt.Errorf("VirtualMachine %s: %w", vm.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// interleaved is one backend per VM to create, the backends taking turns, so that
// every provider is busy from the start.
func (b *bench) interleaved() []*backend {
	left := map[*backend]int{}
	for _, be := range b.backends {
		left[be] = be.vms
	}
	var order []*backend
	for len(order) < b.o.vms {
		for _, be := range b.backends {
			if left[be] > 0 {
				order = append(order, be)
				left[be]--
			}
		}
	}
	return order
}

// measureDirect makes each backend's share of creations with its client library, all
// backends at once, as banlieue did them.
func (b *bench) measureDirect(ctx context.Context) error {
	b.directByClass = map[string]time.Duration{}
	cpu := selfUsage().CPU
	defer func() { b.directCPU = selfUsage().CPU - cpu }()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	for _, be := range b.backends {
		wg.Go(func() {
			s := time.Now()
			err := be.direct(ctx, be.vms)
			mu.Lock()
			defer mu.Unlock()
			b.directByClass[be.class] = time.Since(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("direct %s: %w", be.class, err))
			}
		})
	}
	wg.Wait()
	b.direct = time.Since(start)
	logf("Direct creations done in %s", b.direct.Round(time.Millisecond))
	return errors.Join(errs...)
}

// saveHeapProfiles saves each controller's heap profile to the run's folder, with
// -pprof; a profile that cannot be read is logged, as the run's figures stand without it.
func (b *bench) saveHeapProfiles(ctx context.Context) {
	for name, addr := range b.pprofAddrs {
		path := filepath.Join(b.o.dir, name+".heap")
		if err := download(ctx, "http://"+addr+"/debug/pprof/heap", path); err != nil {
			logf("Warning: no heap profile of %s: %v", name, err)
			continue
		}
		logf("Heap profile of %s: %s", name, path)
	}
}

// countVMs asks the API server how many VirtualMachines there are, with a list of one
// item's metadata and the count of those that remain.
func (b *bench) countVMs(ctx context.Context) (int, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(banlieuev1.GroupVersion.WithKind("VirtualMachineList"))
	if err := b.client.List(ctx, list, client.Limit(1)); err != nil {
		return 0, err
	}
	return len(list.Items) + int(ptr.Deref(list.RemainingItemCount, 0)), nil
}

// startCPUProfile profiles the harness process itself (the simulators and the VM
// watch) from the first create until all are Ready, with -pprof, into
// <dir>/harness.cpu; the function it returns ends the profile and may be called again.
func (b *bench) startCPUProfile() func() {
	if !b.o.pprof {
		return func() {}
	}
	path := filepath.Join(b.o.dir, "harness.cpu")
	f, err := os.Create(path) //nolint:gosec // a profile path in the benchmark's own folder
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		logf("Warning: no CPU profile of the harness: %v", err)
		return func() {}
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		logf("CPU profile of the harness (simulators, watch): %s", path)
	})
}

// download saves the body of a GET of url to path.
func download(ctx context.Context, url, path string) error {
	body, err := harness.Get(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	f, err := os.Create(path) //nolint:gosec // a heap profile path in the benchmark's own folder
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
