package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/pkg/sharding"
	"github.com/banlieue/banlieue/providers/vsphere"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

// shardLease is the core shards' registration lifetime in this test, short so that a
// killed shard's namespaces are handed off within seconds.
const shardLease = "6s"

// TestCoreShardsHandOffWithoutPlacingTwice replaces one core instance by two core
// shards while VMs are being created, as an operator scaling core out would, and
// kills the old instance in the middle of it: the new shards hold the namespaces the
// old one still claims, take them over once its registration expires, and every VM
// ends with one placement, one machine and one vCenter VM.
func TestCoreShardsHandOffWithoutPlacingTwice(t *testing.T) {
	testenv.Assets(t)
	ctx := context.Background()
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := env.InstallAdmission(); err != nil {
		t.Fatal(err)
	}
	vs, err := vspheresim.Start(vspheresim.Options{Templates: []string{devenv.VSphereTemplate}, GuestAddressDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, "the vCenter simulator", vs.Stop) })

	logDir, err := os.MkdirTemp("", "banlieue-shards-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs are in %s", logDir)
			return
		}
		_ = os.RemoveAll(logDir)
	})
	bin, err := harness.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string, args ...string) *harness.Process {
		kubeconfig, err := env.Kubeconfig(logDir, name)
		if err != nil {
			t.Fatal(err)
		}
		return harness.StartForTest(t, 5*time.Second, bin, logDir, name, append(args, "--kubeconfig", kubeconfig)...)
	}

	const tenants, perTenant = 6, 4
	objs := append([]client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devenv.ProviderNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sharding.DefaultNamespace}},
	}, devenv.VSphereObjects(vs)...)
	for i := range tenants {
		ns := fmt.Sprintf("tenant-%d", i)
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	objs = append(objs, devenv.Class(className, 1, 256), devenv.Image(imageName))
	c := env.Client
	placements := watchPlacements(ctx, t, env)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("failed to create %s: %v", client.ObjectKeyFromObject(o), err)
		}
	}
	start("provider-vsphere", "provider", vsphere.ProviderClass)
	// The instance before: one core, every namespace; it records every step's Event,
	// so each VM's placements can be counted.
	old := start("core-old", "controller", "--events", "all", "--shard-lease-duration", shardLease)

	createVMs := func(batch int) {
		for i := range tenants {
			for j := range perTenant / 2 {
				vm := builder.VirtualMachine(fmt.Sprintf("tenant-%d", i), fmt.Sprintf("vm-%d-%d", batch, j), className, imageName)
				if err := c.Create(ctx, vm); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	createVMs(0)
	// The shards after: two, each with its own leader election and registration.
	shards := []*harness.Process{
		start("core-0-of-2", "controller", "--events", "all", "--shard-count", "2", "--shard-index", "0", "--shard-lease-duration", shardLease),
		start("core-1-of-2", "controller", "--events", "all", "--shard-count", "2", "--shard-index", "1", "--shard-lease-duration", shardLease),
	}
	g := NewWithT(t)
	// While the old instance runs, the new shards hold every namespace back.
	g.Eventually(func(g Gomega) {
		for _, s := range shards {
			g.Expect(holds(ctx, g, s, "conflict")).To(BeNumerically(">", 0), "%s held nothing back", s.Name)
		}
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	// The second batch lands while the old instance dies: killed, so its registration
	// is not released and the shards wait for it to expire.
	createVMs(1)
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}

	g.Eventually(func(g Gomega) {
		list := &banlieuev1.VirtualMachineList{}
		g.Expect(c.List(ctx, list)).To(Succeed())
		g.Expect(list.Items).To(HaveLen(tenants * perTenant))
		for _, vm := range list.Items {
			g.Expect(meta.IsStatusConditionTrue(vm.Status.Conditions, banlieuev1.ReadyCondition)).To(BeTrue(), "%s/%s is not Ready", vm.Namespace, vm.Name)
		}
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

	// One placement, one machine and one vCenter VM per VirtualMachine.
	machines := &infrav1.VSphereMachineList{}
	g.Expect(c.List(ctx, machines)).To(Succeed())
	g.Expect(machines.Items).To(HaveLen(tenants * perTenant))
	inventory, err := vsphereVMs(ctx, vs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inventory).To(HaveLen(tenants * perTenant))
	// A placement is a write of a VM's status.scheduled, seen by the test's own watch:
	// the Scheduled Events cannot count them, since the killed instance's last ones die
	// with it, unsent.
	g.Eventually(placements).WithTimeout(30*time.Second).WithPolling(time.Second).Should(HaveLen(tenants*perTenant),
		"VMs whose placement the watch saw")
	for vm, n := range placements() {
		g.Expect(n).To(Equal(1), "%s was placed %d times", vm, n)
	}
	// Events may be lost with a process, never doubled.
	events := &eventsv1.EventList{}
	g.Expect(c.List(ctx, events)).To(Succeed())
	for vm, n := range scheduledEvents(events) {
		g.Expect(n).To(Equal(1), "%s has %d Scheduled Events", vm, n)
	}
	// Every VM is counted by exactly one shard, and each shard serves its half.
	var counted float64
	for _, s := range shards {
		n := vmsCounted(ctx, g, s)
		g.Expect(n).To(BeNumerically(">", 0), "%s serves no VM", s.Name)
		counted += n
	}
	g.Expect(counted).To(BeEquivalentTo(tenants*perTenant), "VMs counted by the two shards")

	// A shard that stops cleanly releases its registration at once; the killed
	// instance's stays until someone deletes it, counted by nobody once expired.
	g.Expect(shards[0].Stop(10 * time.Second)).To(Succeed())
	g.Eventually(func(g Gomega) []string {
		leases := &coordinationv1.LeaseList{}
		g.Expect(c.List(ctx, leases, client.InNamespace(sharding.DefaultNamespace), client.HasLabels{virtualmachine.CoreShardLabel})).To(Succeed())
		names := make([]string, 0, len(leases.Items))
		for _, l := range leases.Items {
			names = append(names, l.Name)
		}
		return names
	}).WithTimeout(30*time.Second).Should(ConsistOf(virtualmachine.CoreShardLeaseName(0, 1, ""), virtualmachine.CoreShardLeaseName(1, 2, "")),
		"the registrations left: the killed instance's and the running shard's")
}

// watchPlacements watches every VirtualMachine from now until the test ends, and
// returns a function that counts, per VM, the writes that set or changed its
// status.scheduled. The watch resumes where it stopped when the API server ends it, so
// no write is missed. A placement written again identically within the same second
// (scheduledAt is kept to the second) changes nothing and is not counted.
func watchPlacements(ctx context.Context, t *testing.T, env *testenv.Env) func() map[string]int {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	list := &banlieuev1.VirtualMachineList{}
	if err := wc.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &banlieuev1.VirtualMachineList{}, &client.ListOptions{Raw: &opts})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	last := map[string]banlieuev1.ScheduledPlacement{}
	placed := map[string]int{}
	go func() {
		for e := range w.ResultChan() {
			vm, ok := e.Object.(*banlieuev1.VirtualMachine)
			if !ok || e.Type == watch.Deleted || !vm.Status.Scheduled.IsDefined() {
				continue
			}
			key := vm.Namespace + "/" + vm.Name
			mu.Lock()
			if !equality.Semantic.DeepEqual(last[key], vm.Status.Scheduled) {
				last[key] = vm.Status.Scheduled
				placed[key]++
			}
			mu.Unlock()
		}
	}()
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(placed)
	}
}

// scheduledEvents counts each VM's Scheduled Events, a series counted by its count.
func scheduledEvents(events *eventsv1.EventList) map[string]int {
	placed := map[string]int{}
	for _, e := range events.Items {
		if e.Reason == banlieuev1.VirtualMachineScheduledReason && e.Regarding.Kind == "VirtualMachine" {
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			placed[e.Regarding.Namespace+"/"+e.Regarding.Name] += n
		}
	}
	return placed
}

// holds is a core process's banlieue_core_shard_holds_total of reason.
func holds(ctx context.Context, g Gomega, p *harness.Process, reason string) float64 {
	families, err := p.Metrics(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	f := families["banlieue_core_shard_holds_total"]
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		if harness.Label(m, "reason") == reason {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// vmsCounted is the sum of a core process's banlieue_virtualmachines: the VMs it
// serves.
func vmsCounted(ctx context.Context, g Gomega, p *harness.Process) float64 {
	families, err := p.Metrics(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, m := range families["banlieue_virtualmachines"].GetMetric() {
		n += m.GetGauge().GetValue()
	}
	return n
}
