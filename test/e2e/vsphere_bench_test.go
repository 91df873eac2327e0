package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/client-go/kubernetes"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/builder"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
	"github.com/banlieue/banlieue/test/harness"
)

// benchVMs is how many VMs one round of BenchmarkVSphereVMsToReady creates.
const benchVMs = 200

// BenchmarkVSphereVMsToReady creates 200 VirtualMachines through core and the vSphere
// provider against vcsim and reports the time until all are Ready, the vCenter API calls
// and Kubernetes API writes per VM, and the same 200 clones made directly with govmomi
// in the same run, as a ratio. Run it with:
//
//	make bench-vsphere
func BenchmarkVSphereVMsToReady(b *testing.B) {
	for b.Loop() {
		f := newFixture(b)
		vs := vspheretest.Start(b)
		f.startProvider(vsphereConfig(nil))
		p := f.vsphereProvider(vs)
		f.eventually(p, func(g Gomega) { g.Expect(conditionOf(p.Status.Conditions, "Ready")).To(Equal("True/Ready: ")) }, 30*time.Second)
		class := f.class("tiny", func(c *banlieuev1.VMClass) {
			c.Spec.Hardware.CPUs, c.Spec.Hardware.MemoryMiB = 1, 512
			c.Spec.Hardware.Disks = []banlieuev1.Disk{{Name: "root", SizeGiB: 10, StorageClass: "fast"}}
			c.Spec.Network.Interfaces = []banlieuev1.Interface{{Name: "eth0", NetworkClass: "prod"}}
		})
		img := f.image("ubuntu", builder.Template(vsphere.ProviderClass, vspheretest.TemplateName))
		f.eventually(img, func(g Gomega) { g.Expect(img.Status.PerProvider).NotTo(BeEmpty()) }, 30*time.Second)

		callsBefore, writesBefore := backendCalls(), apiWrites(f)
		start := time.Now()
		vms := make([]*banlieuev1.VirtualMachine, benchVMs)
		for i := range vms {
			vms[i] = f.vm(fmt.Sprintf("vm-%03d", i), class, img)
		}
		for _, vm := range vms {
			f.eventually(vm, func(g Gomega) { g.Expect(conditionOf(vm.Status.Conditions, "Ready")).To(HavePrefix("True/")) }, 10*time.Minute)
		}
		viaBanlieue := time.Since(start)
		// The VMs' own creation (benchVMs POSTs) is the user's, not banlieue's.
		writesAfter := apiWrites(f)
		writes := writesAfter.total() - writesBefore.total() - benchVMs
		b.Logf("API writes per VM by resource: %s", writesAfter.perVM(writesBefore, benchVMs))
		callsAfter := backendCalls()
		calls := callsAfter.total() - callsBefore.total()
		b.Logf("vCenter calls per VM by operation: %s", callsAfter.perVM(callsBefore, benchVMs))

		direct := cloneDirectly(f, vs, benchVMs)
		b.ReportMetric(viaBanlieue.Seconds(), "s-to-ready")
		b.ReportMetric(direct.Seconds(), "s-direct")
		b.ReportMetric(viaBanlieue.Seconds()/direct.Seconds(), "ratio")
		b.ReportMetric(calls/benchVMs, "vcenter-calls/VM")
		b.ReportMetric(writes/benchVMs, "k8s-writes/VM")
	}
}

// cloneDirectly clones the template n times with govmomi, as banlieue does (same shape,
// powered on, all at once), and returns how long it took until every task succeeded.
func cloneDirectly(f *fixture, vs *vspheretest.Simulator, n int) time.Duration {
	ctx := context.Background()
	c := vs.Client.Client
	finder := find.NewFinder(c)
	folder, err := finder.Folder(ctx, "/"+vspheretest.Datacenter+"/vm")
	f.g.Expect(err).NotTo(HaveOccurred())
	pool, err := finder.ResourcePool(ctx, "/"+vspheretest.Datacenter+"/host/"+vspheretest.Cluster+"/Resources")
	f.g.Expect(err).NotTo(HaveOccurred())
	tpl := object.NewVirtualMachine(c, types.ManagedObjectReference{Type: "VirtualMachine", Value: vs.TemplateRef})
	poolRef := pool.Reference()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			spec := types.VirtualMachineCloneSpec{
				Location: types.VirtualMachineRelocateSpec{Pool: &poolRef},
				Config:   &types.VirtualMachineConfigSpec{NumCPUs: 1, MemoryMB: 512},
				PowerOn:  true,
			}
			task, err := tpl.Clone(ctx, folder, fmt.Sprintf("direct-%03d", i), spec)
			if err == nil {
				err = task.Wait(ctx)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.g.Expect(err).NotTo(HaveOccurred())
	}
	return time.Since(start)
}

// backendCalls reads providersdk.BackendCalls for the vSphere provider, by operation.
func backendCalls() writeCounts {
	ch := make(chan prometheus.Metric, 1024)
	go func() { providersdk.BackendCalls.Collect(ch); close(ch) }()
	calls := writeCounts{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil && harness.Label(&d, "class") == vsphere.ProviderClass {
			calls[harness.Label(&d, "operation")] += d.GetCounter().GetValue()
		}
	}
	return calls
}

// writeCounts are counts by key: the API server's own counts of write requests
// (apiserver_request_total for POST, PUT, PATCH, APPLY and DELETE) by "verb
// resource[/subresource]", or backend calls by operation.
type writeCounts map[string]float64

func (w writeCounts) total() float64 {
	sum := 0.0
	for _, v := range w {
		sum += v
	}
	return sum
}

// perVM formats the writes made since before, per VM, largest first.
func (w writeCounts) perVM(before writeCounts, vms int) string {
	type row struct {
		key string
		n   float64
	}
	var rows []row
	for k, v := range w {
		if d := v - before[k]; d > 0 {
			rows = append(rows, row{k, d / float64(vms)})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].n > rows[j].n })
	parts := make([]string, 0, len(rows))
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %.2f", r.key, r.n))
	}
	return strings.Join(parts, ", ")
}

// apiWrites reads the API server's write counts from its /metrics.
func apiWrites(f *fixture) writeCounts {
	cs, err := kubernetes.NewForConfig(cfg)
	f.g.Expect(err).NotTo(HaveOccurred())
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	f.g.Expect(err).NotTo(HaveOccurred())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	f.g.Expect(err).NotTo(HaveOccurred())
	counts := writeCounts{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		switch verb := harness.Label(m, "verb"); verb {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE":
			key := verb + " " + harness.Label(m, "resource")
			if sub := harness.Label(m, "subresource"); sub != "" {
				key += "/" + sub
			}
			counts[key] += m.GetCounter().GetValue()
		}
	}
	return counts
}
