package monitoring

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/internal/devenv"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
	"github.com/banlieue/banlieue/test/harness"
	"github.com/banlieue/banlieue/test/testenv"
)

// notExportedYet are metrics the rule queries before any binary exports them, each with
// the issue that adds it. The test fails when one of them is exported after all, so
// that its entry goes.
var notExportedYet = map[string]string{}

// histogramSuffixes are the series names a histogram or summary family serves besides
// its own name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// exported reports whether name is served by families: a family of that name, or the
// _bucket, _sum or _count series of a histogram (or the _sum or _count of a summary).
func exported(families map[string]*dto.MetricFamily, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, s := range histogramSuffixes {
		base, ok := strings.CutSuffix(name, s)
		if !ok {
			continue
		}
		switch families[base].GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			return s != "_bucket"
		}
	}
	return false
}

// TestEveryQueriedMetricIsExported runs banlieue's binary as the core controller and
// the vSphere provider against a real API server and vcsim, makes a VM Ready so that
// the per-VM and per-call metrics have samples, scrapes both processes' /metrics on
// loopback, and checks that each metric the alerts and the dashboard query is served
// by one of them.
func TestEveryQueriedMetricIsExported(t *testing.T) {
	testenv.Assets(t)
	queried := queriedMetrics(t)
	if t.Failed() {
		t.FailNow()
	}
	dir := t.TempDir()
	bin, err := harness.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start("config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// No guest addresses: Ready needs none, and the run is shorter without the filter.
	vs, err := vspheresim.Start(vspheresim.Options{Templates: []string{devenv.VSphereTemplate}, GuestAddressDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vs.Stop)

	start := func(name string, args ...string) *harness.Process {
		t.Helper()
		kubeconfig, err := env.Kubeconfig(dir, "banlieue-"+name)
		if err != nil {
			t.Fatal(err)
		}
		p := harness.StartForTest(t, 10*time.Second, bin, dir, name, append(args, "--kubeconfig", kubeconfig)...)
		t.Cleanup(func() {
			if t.Failed() {
				if log, err := os.ReadFile(dir + "/" + name + ".log"); err == nil {
					t.Logf("log of %s:\n%s", name, tail(string(log), 40))
				}
			}
		})
		return p
	}
	procs := []*harness.Process{start("controller", "controller"), start("provider-vsphere", "provider", "vsphere")}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "monitoring"
	objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devenv.ProviderNamespace}}}, devenv.VSphereObjects(vs)...)
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		devenv.Class("monitoring-tiny", 1, 512),
		devenv.Image("monitoring-image"),
		builder.VirtualMachine(ns, "vm-1", "monitoring-tiny", "monitoring-image"),
	)
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("failed to create %T %s: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	// Ready: the time to Ready is observed, backend calls and reconciles are counted.
	for {
		vm := &banlieuev1.VirtualMachine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm-1"}, vm); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(vm.Status.Conditions, banlieuev1.ReadyCondition) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the VM was not Ready within 3 minutes: %+v", vm.Status.Conditions)
		case <-time.After(500 * time.Millisecond):
		}
	}

	families := map[string]*dto.MetricFamily{}
	for _, p := range procs {
		fams, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range fams {
			families[name] = f
		}
	}
	names := make([]string, 0, len(queried))
	for name := range queried {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		where := strings.Join(queried[name], "\n    ")
		if why, ok := notExportedYet[name]; ok {
			if exported(families, name) {
				t.Errorf("%s is exported now (%s): remove it from notExportedYet", name, why)
			}
			for _, w := range queried[name] {
				if !strings.Contains(w, "group banlieue-orphans") {
					t.Errorf("%s is not exported yet (%s), and only the rule group banlieue-orphans may query it; it is queried in %s", name, why, w)
				}
			}
			continue
		}
		if !exported(families, name) {
			t.Errorf("%s is exported by neither the core controller nor the vSphere provider; queried in\n    %s", name, where)
		}
	}
	t.Logf("%d metrics queried, checked against %d families served", len(names), len(families))
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
