package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// mib is a mebibyte.
const mib = 1 << 20

// machine describes where the run happened.
type machine struct {
	cpu, memory, load, goVersion string
	cores                        int
}

func describeMachine() machine {
	m := machine{cores: runtime.NumCPU(), goVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb uint64
				_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}

// providerOf returns obj when it is a Provider of class.
func providerOf(obj client.Object, class string) *banlieuev1.Provider {
	if p, ok := obj.(*banlieuev1.Provider); ok && p.Spec.ProviderClassRef.Name == class {
		return p
	}
	return nil
}

// report renders the run as Markdown.
func (b *bench) report() string {
	var w strings.Builder
	n := float64(b.o.vms)
	fmt.Fprintf(&w, "### N = %d (%s)%s, core's Events: %s%s%s%s\n\n", b.o.vms, b.shares(), cond(b.sharded(), ", "+b.layout(), ""),
		cond(b.o.events != "", b.o.events, "the default (transitions)"), cond(b.o.gomemlimit != "", ", GOMEMLIMIT "+b.o.gomemlimit, ""),
		cond(b.o.coreWorkers > 0, fmt.Sprintf(", core's --workers %d", b.o.coreWorkers), ""),
		cond(b.o.providerWorkers > 0, fmt.Sprintf(", providers' --workers %d", b.o.providerWorkers), ""))
	fmt.Fprintf(&w, "Machine: %d cores (%s), %s RAM, %s; load average %s at the start. Simulators (in the harness, GOGC %s), kube-apiserver and etcd run on the same machine.\n\n",
		b.machine.cores, b.machine.cpu, b.machine.memory, b.machine.goVersion, b.machine.load, harnessGOGC())

	coreCreate, provCreate := b.writes(b.before, b.ready)
	fmt.Fprintf(&w, "| measure | banlieue | direct client | ratio |\n|---|---|---|---|\n")
	fmt.Fprintf(&w, "| all %d Ready (from the first create) | %s | %s | %s |\n", b.o.vms, secs(b.readyAt), b.directCell(b.direct), b.ratio(b.readyAt, b.direct))
	for _, be := range b.backends {
		if be.vms == 0 {
			continue
		}
		d := b.directByClass[be.class]
		fmt.Fprintf(&w, "| — %s, %d VMs%s | %s | %s | %s |\n", be.class, be.vms, cond(be.powerOff, " (PoweredOff)", ""), secs(b.readyBy[be.class]), b.directCell(d), b.ratio(b.readyBy[be.class], d))
	}
	fmt.Fprintf(&w, "| each VM, created → Ready: p50 / p95 / p99 | %s | | |\n", quantiles(b.latencies[""]))
	for _, be := range b.backends {
		if be.vms > 0 {
			fmt.Fprintf(&w, "| — %s | %s | | |\n", be.class, quantiles(b.latencies[be.class]))
		}
	}
	fmt.Fprintf(&w, "| all deleted (from the delete) | %s | | |\n", secs(b.deletedAt))
	fmt.Fprintf(&w, "| Kubernetes API writes per VM, create → Ready (core + providers) | %.2f (core %.2f, providers %.2f) | | |\n",
		(coreCreate+provCreate)/n, coreCreate/n, provCreate/n)
	coreDel, provDel := b.writes(b.idle, b.deleted)
	fmt.Fprintf(&w, "| Kubernetes API writes per VM, delete → gone (core + providers) | %.2f (core %.2f, providers %.2f) | | |\n",
		(coreDel+provDel)/n, coreDel/n, provDel/n)
	coreIdle, provIdle := b.writes(b.settled, b.idle)
	calls := 0.0
	for _, be := range b.backends {
		calls += b.idle.backendCalls(be).since(b.settled.backendCalls(be)).sum()
	}
	fmt.Fprintf(&w, "| in %s idle, %s after all Ready: API writes (core + providers) | %.0f (per VM per minute %.3f) | | |\n", b.o.idle, b.o.settle, coreIdle+provIdle, (coreIdle+provIdle)/n/b.o.idle.Minutes())
	fmt.Fprintf(&w, "| in %s idle, %s after all Ready: backend calls | %.0f (per VM per minute %.3f) | | |\n", b.o.idle, b.o.settle, calls, calls/n/b.o.idle.Minutes())
	fmt.Fprintf(&w, "| peak RSS of the harness process (simulators, VM watch) | %.0f MiB | | |\n\n", float64(selfUsage().PeakRSS)/mib)
	b.reportCPU(&w)
	b.reportShards(&w)
	b.reportPlot(&w)

	fmt.Fprintf(&w, "Per process: Kubernetes API requests per VM by HTTP method (its own `rest_client_requests_total`; a provider's per VM of its backend, core's and the harness's per VM of all), backend calls per VM of its backend (`banlieue_backend_calls_total`), CPU time over the whole run and peak RSS.%s\n\n",
		cond(b.sharded(), " A shard's figures are per VM of its whole backend (a provider shard's) or of all (a core shard's), so that the shards' rows add up to the backend's or core's figure.", ""))
	fmt.Fprintf(&w, "| process | phase | GET | POST | PUT | PATCH | DELETE | writes | backend calls | CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range b.processRows() {
		for _, ph := range b.phases() {
			req := ph.to.requests[row.name].since(ph.from.requests[row.name])
			per := row.vms
			if ph.name == "idle" {
				per = 1
			}
			callCell := ""
			if row.provider {
				c := ph.to.calls[row.name].since(ph.from.calls[row.name])
				callCell = fmt.Sprintf("%.2f", c.sum()/per)
				if ph.name == "idle" {
					callCell = fmt.Sprintf("%.0f %s", c.sum(), breakdown(c, 1))
				}
			}
			usage := " | "
			if at := map[string]*snapshot{"create": b.ready, "delete": b.deleted}[ph.name]; at != nil {
				if u, ok := at.usage[row.name]; ok {
					usage = fmt.Sprintf("%.1f | %.0f", u.CPU.Seconds(), float64(u.PeakRSS)/mib)
				}
			}
			fmt.Fprintf(&w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, ph.label(b.o.idle),
				num(req["GET"]/per), num(req["POST"]/per), num(req["PUT"]/per), num(req["PATCH"]/per), num(req["DELETE"]/per),
				num(req.sum(writeMethods...)/per), callCell, usage)
		}
	}
	fmt.Fprintf(&w, "\nCPU s and peak RSS: on the create row, at the moment all were Ready; on the delete row, at the end. Idle rows are absolute counts in the window, not per VM.\n\n")

	fmt.Fprintf(&w, "API server's own count (`apiserver_request_total`, all clients: the harness's %d creations and deletions, the controllers, and kube-apiserver's own lease renewals), per VM:\n\n", b.o.vms)
	fmt.Fprintf(&w, "| verb resource | create → Ready | delete → gone | idle (count) |\n|---|---|---|---|\n")
	create, del, idle := b.ready.apiserver.since(b.before.apiserver), b.deleted.apiserver.since(b.idle.apiserver), b.idle.apiserver.since(b.settled.apiserver)
	keys := map[string]bool{}
	for _, c := range []counts{create, del, idle} {
		for k := range c {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		if !strings.HasPrefix(k, "WATCH ") || create[k]+del[k] > 0 {
			sorted = append(sorted, k)
		}
	}
	slices.SortFunc(sorted, func(a, b string) int {
		return cmp.Or(cmp.Compare(create[b]+del[b], create[a]+del[a]), strings.Compare(a, b))
	})
	for _, k := range sorted {
		fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", k, num(create[k]/n), num(del[k]/n), num(idle[k]))
	}
	fmt.Fprintf(&w, "\nBackend calls per VM of the backend, by operation:\n\n| provider | create → Ready | delete → gone |\n|---|---|---|\n")
	for _, be := range b.backends {
		per := float64(max(be.vms, 1))
		fmt.Fprintf(&w, "| %s | %s | %s |\n", be.class,
			breakdown(b.ready.backendCalls(be).since(b.before.backendCalls(be)), per),
			breakdown(b.deleted.backendCalls(be).since(b.idle.backendCalls(be)), per))
	}
	return w.String()
}

// reportPlot links the run's PNG by its bare name, so that the report and the PNG
// beside it can be copied together, as into docs/.
func (b *bench) reportPlot(w *strings.Builder) {
	if b.plotFile == "" {
		return
	}
	fmt.Fprintf(w, "From the first create until all are deleted, sampled every %s (dashed: all Ready, then the first delete): VMs Ready per backend, Kubernetes API writes per second (each client's `rest_client_requests_total`), each controller's RSS (its `process_resident_memory_bytes`).%s\n\n",
		sampleEvery, cond(b.sharded(), " Each shard has its own line, in its kind's colour, dashed after its index (the first solid).", ""))
	fmt.Fprintf(w, "![VMs Ready, API writes per second and RSS over the run](%s)\n\n", filepath.Base(b.plotFile))
}

// writes are the Kubernetes API writes core and the providers made between two
// snapshots, each added up over all its processes.
func (b *bench) writes(from, to *snapshot) (core, providers float64) {
	for _, p := range b.processes() {
		w := to.requests[p.Name].since(from.requests[p.Name]).sum(writeMethods...)
		if slices.Contains(b.core, p) {
			core += w
		} else {
			providers += w
		}
	}
	return core, providers
}

// processRow is one row group of the per-process table: a process, whether it is a
// provider (with backend calls), and the VMs its figures are per.
type processRow struct {
	name     string
	provider bool
	vms      float64
}

// reportCPU says where the machine's CPU went from the first create until all were
// Ready, every process that shares the machine included, and what the direct path's
// simulators took: a run that used all of it was bound by CPU, not by waiting.
func (b *bench) reportCPU(w *strings.Builder) {
	elapsed := b.ready.at.Sub(b.before.at)
	available := elapsed.Seconds() * float64(b.machine.cores)
	type row struct {
		name string
		cpu  time.Duration
	}
	procs := b.processes()
	rows := make([]row, 0, 3+len(procs))
	rows = append(rows,
		row{apiserverName, b.ready.cpu[apiserverName] - b.before.cpu[apiserverName]},
		row{etcdName, b.ready.cpu[etcdName] - b.before.cpu[etcdName]},
		row{harnessName + ": simulators, VM watch", b.ready.cpu[harnessName] - b.before.cpu[harnessName]})
	// These three do the same work whatever the controllers cost: the API server's for
	// the writes, the backends' for the VMs.
	var notControllers time.Duration
	for _, r := range rows {
		notControllers += r.cpu
	}
	for _, p := range procs {
		rows = append(rows, row{p.Name, b.ready.usage[p.Name].CPU - b.before.usage[p.Name].CPU})
	}
	var total time.Duration
	for _, r := range rows {
		total += r.cpu
	}
	fmt.Fprintf(w, "CPU from the first create until all were Ready (%s on %d cores: %.0f CPU s), by process (kube-apiserver's and etcd's own `process_cpu_seconds_total`, the others' from the kernel):\n\n", secs(elapsed), b.machine.cores, available)
	fmt.Fprintf(w, "| process | CPU s | share of the machine |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.1f | %.0f%% |\n", r.name, r.cpu.Seconds(), 100*r.cpu.Seconds()/available)
	}
	fmt.Fprintf(w, "| all | %.1f | %.0f%% |\n\n", total.Seconds(), 100*total.Seconds()/available)
	fmt.Fprintf(w, "The hypervisor ran something else for %.1f CPU s of that time (`/proc/stat`'s steal).\n\n", (b.ready.steal - b.before.steal).Seconds())
	if b.directErr == nil && b.direct > 0 {
		fmt.Fprintf(w, "The direct path needs no API server: its simulators used %.1f CPU s in its %s (%.0f%% of the machine).\n\n",
			b.directCPU.Seconds(), secs(b.direct), 100*b.directCPU.Seconds()/(b.direct.Seconds()*float64(b.machine.cores)))
		atBest := time.Duration(float64(notControllers) / float64(b.machine.cores))
		fmt.Fprintf(w, "kube-apiserver, etcd and the harness alone used %.1f CPU s: %s of the cores at full use, %.2f× the direct path, a ratio no controller, however cheap, could have brought this run below.\n\n",
			notControllers.Seconds(), secs(atBest), atBest.Seconds()/b.direct.Seconds())
	}
}

// processRows are the per-process table's: each core process per VM of all, each
// provider process per VM of its backend, and the harness per VM of all.
func (b *bench) processRows() []processRow {
	var rows []processRow
	for _, p := range b.core {
		rows = append(rows, processRow{name: p.Name, vms: float64(b.o.vms)})
	}
	for _, be := range b.backends {
		for _, sh := range be.shards {
			rows = append(rows, processRow{name: sh.proc.Name, provider: true, vms: float64(max(be.vms, 1))})
		}
	}
	return append(rows, processRow{name: harnessName, vms: float64(b.o.vms)})
}

type phase struct {
	name     string
	from, to *snapshot
}

func (p phase) label(idle time.Duration) string {
	if p.name == "idle" {
		return fmt.Sprintf("idle %s (count)", idle)
	}
	return p.name
}

func (b *bench) phases() []phase {
	return []phase{{"create", b.before, b.ready}, {"idle", b.settled, b.idle}, {"delete", b.idle, b.deleted}}
}

// directCell is a duration of the direct path, or why there is none.
func (b *bench) directCell(d time.Duration) string {
	if errors.Is(b.directErr, errDirectSkipped) {
		return b.directErr.Error()
	}
	if b.directErr != nil {
		return "failed (see the log)"
	}
	return secs(d)
}

// ratio is banlieue's time over the direct path's, or "—" without a direct figure.
func (b *bench) ratio(banlieue, direct time.Duration) string {
	if b.directErr != nil || direct <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", banlieue.Seconds()/direct.Seconds())
}

// breakdown formats counts divided by per, largest first.
func breakdown(c counts, per float64) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c[b], c[a]), strings.Compare(a, b)) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, num(c[k]/per)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}

// quantiles formats the p50, p95 and p99 of ds for a table cell.
func quantiles(ds []time.Duration) string {
	return fmt.Sprintf("%s / %s / %s", secs(percentile(ds, 50)), secs(percentile(ds, 95)), secs(percentile(ds, 99)))
}
