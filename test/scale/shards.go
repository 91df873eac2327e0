package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/internal/controller/virtualmachine"
	"github.com/banlieue/banlieue/pkg/sharding"
	"github.com/banlieue/banlieue/providers/proxmox"
	"github.com/banlieue/banlieue/providers/vsphere"
)

// Shards (docs/scale-out.md, issue 19). With -core-shards K the harness runs K core
// processes, which divide the VMs by namespace, and spreads the VMs over namespaces so
// that every shard gets a share. With -provider-shards S it splits the vSphere and the
// Proxmox VE backend each into S Providers, each served by a provider process of its
// own.
//
// The S Providers of a backend are S Providers on one simulator: the S "vCenters" are
// one simulated vCenter seen S times, and likewise for Proxmox VE. That measures
// banlieue's side of sharding (its processes' API requests, backend calls, CPU and
// memory), not S real vCenters, whose capacity would add up where here they share one
// simulator and the machine's cores; and each shard sees the others' VMs in the
// backend's listings, which on a backend of its own it would not. The report says so.

const (
	// scaleShardLabel on a split backend's Provider is the index of the provider shard
	// that serves it, which runs with --provider-selector scaleShardLabel=<index>.
	scaleShardLabel = "banlieue.io/scale-shard"
	// minNamespaces and namespacesPerShard size the namespaces of a sharded core's VMs:
	// max(minNamespaces, namespacesPerShard×K), enough that the hash dividing them
	// gives every shard several, so that no shard's share hangs on one name.
	minNamespaces, namespacesPerShard = 16, 4
)

// shardedClasses are the backends -provider-shards splits. libvirt stays one Provider
// and one process: its VMs are few (-libvirt-max), real domains of one libvirtd.
var shardedClasses = []string{vsphere.ProviderClass, proxmox.ProviderClass}

// vmNamespaces are the namespaces the VMs go to: namespace alone for one core, as
// before shards existed; for k core shards, max(16, 4k) namespaces scale-00,
// scale-01, and so on.
func vmNamespaces(coreShards int) []string {
	if coreShards <= 1 {
		return []string{namespace}
	}
	names := make([]string, max(minNamespaces, namespacesPerShard*coreShards))
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", namespace, i)
	}
	return names
}

// assignNamespaces gives each VM, whose backend turns names, a namespace: each
// backend's VMs take the namespaces in turn, so that every namespace, and so every core
// shard, gets a like share of every backend's VMs. Taking turns over all the VMs would
// not: the backends take turns too, and with two of them and an even number of
// namespaces each namespace would get one backend's VMs only.
func assignNamespaces[B comparable](turns []B, namespaces []string) []string {
	nth := map[B]int{}
	out := make([]string, len(turns))
	for i, be := range turns {
		out[i] = namespaces[nth[be]%len(namespaces)]
		nth[be]++
	}
	return out
}

// coreShare is what one core shard serves of the run.
type coreShare struct {
	namespaces []string // sorted
	vms        int
}

// coreShares divides the VMs, counted by namespace, between k core shards by the rule
// the shards follow themselves (virtualmachine.Shard.Claims: FNV-1a of the namespace,
// modulo k), so that the report can show each shard's share. It fails when a shard
// would serve no VM: its process would idle, and the run would measure fewer shards
// than it says.
func coreShares(perNamespace map[string]int, k int) ([]coreShare, error) {
	shares := make([]coreShare, k)
	for i := range k {
		shard, err := virtualmachine.NewShard(i, k, "", "", sharding.DefaultTiming)
		if err != nil {
			return nil, err
		}
		for _, ns := range slices.Sorted(maps.Keys(perNamespace)) {
			if shard.Claims(ns, nil) {
				shares[i].namespaces = append(shares[i].namespaces, ns)
				shares[i].vms += perNamespace[ns]
			}
		}
		if shares[i].vms == 0 {
			return nil, fmt.Errorf("core shard %d of %d would serve none of the VMs (their namespaces: %s); run more VMs", i, k, strings.Join(slices.Sorted(maps.Keys(perNamespace)), ", "))
		}
	}
	return shares, nil
}

// splitProviders returns objs with each Provider of the classes replaced by s copies,
// named <name>-0 … <name>-<s-1> and labelled scaleShardLabel=<index>. Everything else
// stays: the copies keep the labels the VMs' placement selects on (so placement
// spreads a backend's VMs among them), their credentials Secret and their simulator.
// With s = 1, objs are returned as they are.
func splitProviders(objs []client.Object, s int, classes ...string) []client.Object {
	if s <= 1 {
		return objs
	}
	out := make([]client.Object, 0, len(objs))
	for _, obj := range objs {
		p, ok := obj.(*banlieuev1.Provider)
		if !ok || !slices.Contains(classes, p.Spec.ProviderClassRef.Name) {
			out = append(out, obj)
			continue
		}
		for i := range s {
			c := p.DeepCopy()
			c.Name = fmt.Sprintf("%s-%d", p.Name, i)
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			c.Labels[scaleShardLabel] = strconv.Itoa(i)
			out = append(out, c)
		}
	}
	return out
}

// providersOf are the Providers of class among objs.
func providersOf(objs []client.Object, class string) []*banlieuev1.Provider {
	var ps []*banlieuev1.Provider
	for _, obj := range objs {
		if p := providerOf(obj, class); p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// providerProcess is the name and the arguments of the provider process that serves
// p: provider-<class> and every Provider of the class, or, for a Provider that
// splitProviders made, provider-<class>-<index> and the Providers labelled with its
// index.
func providerProcess(p *banlieuev1.Provider) (name string, args []string) {
	class := p.Spec.ProviderClassRef.Name
	name, args = "provider-"+class, []string{"provider", class}
	if shard, ok := p.Labels[scaleShardLabel]; ok {
		name += "-" + shard
		args = append(args, "--provider-selector", scaleShardLabel+"="+shard)
	}
	return name, args
}

// coreProcess is the name and the arguments of core shard i of k, given the core's
// arguments: controller and no shard flags for one core, as before shards existed;
// controller-<i> and --shard-count k --shard-index i for several.
func coreProcess(i, k int, core []string) (name string, args []string) {
	if k <= 1 {
		return "controller", core
	}
	return fmt.Sprintf("controller-%d", i), append(slices.Clone(core), "--shard-count", strconv.Itoa(k), "--shard-index", strconv.Itoa(i))
}

// sharded reports whether the run has more than one core or provider process of a
// kind.
func (b *bench) sharded() bool { return b.o.coreShards > 1 || b.o.providerShards > 1 }

// layout names the run's shards, for the report's heading and the plot's title; ""
// for an unsharded run.
func (b *bench) layout() string {
	if !b.sharded() {
		return ""
	}
	return fmt.Sprintf("%d core shards, %d provider shards", b.o.coreShards, b.o.providerShards)
}

// reportShards says how the run was sharded and what each process served and wrote;
// nothing for an unsharded run, whose report stays as it was.
func (b *bench) reportShards(w *strings.Builder) {
	if !b.sharded() {
		return
	}
	fmt.Fprintf(w, "Shards ([scale-out.md](scale-out.md)): ")
	if k := b.o.coreShards; k > 1 {
		fmt.Fprintf(w, "%d core processes `controller --shard-count %d --shard-index i`, each serving the VMs of the namespaces whose FNV-1a hash modulo %d is its index (the VMs spread over %d namespaces, each backend's taking them in turn); ",
			k, k, k, len(b.namespaces))
	} else {
		fmt.Fprintf(w, "one core process; ")
	}
	if s := b.o.providerShards; s > 1 {
		fmt.Fprintf(w, "%d provider processes for each of %s (`provider <class> --provider-selector %s=i`), each serving one of its backend's %d Providers, and one for each other backend. "+
			"The %d vSphere \"vCenters\" are %d Providers on one simulated vCenter, and likewise for Proxmox VE: this measures banlieue's side of sharding (its processes' requests, backend calls, CPU and memory), not %d real vCenters, whose capacity would add up where here they share one simulator and the machine's cores. "+
			"Each provider shard also sees the other shards' VMs in the shared backend's listings, which %d separate backends would not show it.\n\n",
			s, strings.Join(shardedClasses, " and "), scaleShardLabel, s, s, s, s, s)
	} else {
		fmt.Fprintf(w, "one provider process per backend.\n\n")
	}
	fmt.Fprintf(w, "| process | serves | VMs | API writes, create → Ready | per VM it serves |\n|---|---|---|---|---|\n")
	row := func(name, serves string, vms int) {
		writes := b.ready.requests[name].since(b.before.requests[name]).sum(writeMethods...)
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s |\n", name, serves, vms, writes, num(writes/float64(max(vms, 1))))
	}
	for i, p := range b.core {
		if len(b.core) == 1 {
			row(p.Name, "every namespace", b.o.vms)
			continue
		}
		share := b.coreShares[i]
		row(p.Name, fmt.Sprintf("%d namespaces: %s", len(share.namespaces), strings.Join(share.namespaces, ", ")), share.vms)
	}
	for _, be := range b.backends {
		for _, sh := range be.shards {
			row(sh.proc.Name, "Provider "+sh.provider, b.placed[sh.provider])
		}
	}
	fmt.Fprintf(w, "\nVMs: a core shard's from its namespaces; a provider shard's, those placed on its Provider (each VM's `status.scheduled`).\n\n")
}
