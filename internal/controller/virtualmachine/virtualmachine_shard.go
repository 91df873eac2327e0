package virtualmachine

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
	"github.com/banlieue/banlieue/pkg/sharding"
)

// Core shards: core instances divide the VirtualMachines by namespace. An instance
// claims the namespaces whose stable hash (FNV-1a of the name) modulo its shard count
// is its index and, when it has one, that its namespace selector matches; it registers
// with a Lease labelled CoreShardLabel, annotated with its index, count and selector,
// which its leader renews (package sharding). It acts on a VM only while no other live
// core shard claims the VM's namespace and, when it serves part of them, while its own
// registration is fresh: during
// a change of the shard count or of the selectors, a namespace that an old and a new
// shard both claim waits until the old one has gone (its Lease deleted as it stops, or
// expired), so a VM is never acted on by two instances and its placement, recorded in
// its status before any machine exists, is read, not made again, by the new one.

const (
	// CoreShardLabel labels the Leases that register core shards.
	CoreShardLabel = "banlieue.io/core-shard"
	// CoreShardIndexAnnotation holds a core shard's index on its Lease.
	CoreShardIndexAnnotation = "banlieue.io/shard-index"
	// CoreShardCountAnnotation holds the shard count a core shard divides by.
	CoreShardCountAnnotation = "banlieue.io/shard-count"
	// CoreShardSelectorAnnotation holds a core shard's namespace selector, "" for every
	// namespace.
	CoreShardSelectorAnnotation = "banlieue.io/namespace-selector"
)

// coreShardHolds counts the reconciles a core shard held back, by reason: a namespace
// another live shard claims too (conflict), or its own registration not fresh
// (unregistered).
var coreShardHolds = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "banlieue_core_shard_holds_total",
	Help: "VirtualMachine reconciles a core shard held back: reason conflict (another live core shard claims the namespace) or unregistered (this shard's Lease is not fresh).",
}, []string{"reason"})

func init() { metrics.Registry.MustRegister(coreShardHolds) }

// Shard is the part of the namespaces a core instance serves.
type Shard struct {
	index, count int
	// selector matches the namespaces' labels; text is it as given ("" for all).
	selector labels.Selector
	text     string
	registry *sharding.Registry

	// mu guards held: why each namespace is held back, so that a hold is logged when
	// it starts and when it ends, not once per VM and look.
	mu   sync.Mutex
	held map[string]string
}

// NewShard returns shard index of count (0 ≤ index < count) restricted to the
// namespaces selector (label selector syntax, "" for all) matches, registered in
// namespace (sharding.DefaultNamespace when empty) with timing.
func NewShard(index, count int, selector, namespace string, timing sharding.Timing) (*Shard, error) {
	if count < 1 || index < 0 || index >= count {
		return nil, fmt.Errorf("shard %d of %d does not exist: the index counts from 0 and is less than the shard count", index, count)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("namespace selector %q does not parse: %w", selector, err)
	}
	if err := timing.Validate(); err != nil {
		return nil, err
	}
	return &Shard{
		index: index, count: count, selector: sel, text: selector,
		registry: sharding.New(CoreShardLabel, "core", CoreShardLeaseName(index, count, selector), namespace, map[string]string{
			CoreShardIndexAnnotation: strconv.Itoa(index), CoreShardCountAnnotation: strconv.Itoa(count), CoreShardSelectorAnnotation: selector,
		}, timing),
	}, nil
}

// CoreShardLeaseName is the name of the Lease that registers core shard index of count
// with selector: "banlieue-core-<12 hex digits of a SHA-256 of the three>". It also
// names the shard's leader election.
func CoreShardLeaseName(index, count int, selector string) string {
	return sharding.LeaseName("banlieue-core", fmt.Sprintf("%d/%d %s", index, count, strings.TrimSpace(selector)))
}

// logHold logs that the namespace is held back, and why, or no longer held (why "").
func (s *Shard) logHold(ctx context.Context, namespace, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[namespace] == why {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithValues("shard", s.registry.Name(), "namespace", namespace)
	if why == "" {
		delete(s.held, namespace)
		log.Info("Serving the namespace's VMs again")
		return
	}
	if s.held == nil {
		s.held = map[string]string{}
	}
	s.held[namespace] = why
	log.Info("Holding the namespace's VMs back", "reason", why)
}

// Registry is the shard's registration, for the manager to run and for Bind.
func (s *Shard) Registry() *sharding.Registry { return s.registry }

// namespaceHash is the stable hash that divides namespaces between shards: FNV-1a,
// fixed by its specification, so every version of banlieue agrees on it.
func namespaceHash(namespace string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace))
	return h.Sum32()
}

// claims reports whether shard index of count with selector sel claims the namespace.
func claims(index, count int, sel labels.Selector, namespace string, nsLabels map[string]string) bool {
	return count > 0 && int(namespaceHash(namespace)%uint32(count)) == index && sel.Matches(labels.Set(nsLabels))
}

// Claims reports whether the shard claims the namespace, whose labels are nsLabels.
func (s *Shard) Claims(namespace string, nsLabels map[string]string) bool {
	return claims(s.index, s.count, s.selector, namespace, nsLabels)
}

// shares reports whether the shard serves only part of the namespaces. Only such a
// shard waits for its own registration before it acts: a lone core, the default,
// acts as it always did, and is still seen by the shards that come to replace it.
func (s *Shard) shares() bool { return s.count > 1 || s.text != "" }

// decision is what a shard does with a VM.
type decision int

const (
	// serve: the shard alone claims the VM's namespace.
	serve decision = iota
	// skip: another shard's namespace.
	skip
	// hold: the shard claims it but must not act now (see held).
	hold
)

// decide says whether the shard acts on the namespace now; for hold, why.
func (s *Shard) decide(ctx context.Context, namespace string, nsLabels map[string]string) (decision, string, error) {
	if !s.Claims(namespace, nsLabels) {
		return skip, "", nil
	}
	if s.shares() && !s.registry.Registered() {
		coreShardHolds.WithLabelValues("unregistered").Inc()
		return hold, "this core shard's Lease " + s.registry.Name() + " is not renewed yet", nil
	}
	others, err := s.registry.Others(ctx)
	if err != nil {
		return hold, "", err
	}
	var also []string
	for i := range others {
		l := &others[i]
		index, err1 := strconv.Atoi(l.Annotations[CoreShardIndexAnnotation])
		count, err2 := strconv.Atoi(l.Annotations[CoreShardCountAnnotation])
		sel, err3 := labels.Parse(l.Annotations[CoreShardSelectorAnnotation])
		// A registration that does not parse claims everything: better held than twice.
		if err1 != nil || err2 != nil || err3 != nil || claims(index, count, sel, namespace, nsLabels) {
			also = append(also, l.Name)
		}
	}
	if len(also) == 0 {
		return serve, "", nil
	}
	slices.Sort(also)
	coreShardHolds.WithLabelValues("conflict").Inc()
	return hold, fmt.Sprintf("namespace %s is claimed by core shards %s and %s; none acts on its VMs until one of them has stopped",
		namespace, s.registry.Name(), strings.Join(also, ", ")), nil
}

// TrimOthers is a cache transform that keeps, of the VirtualMachines and infrastructure
// machines of the namespaces the shard's hash does not claim, only their identity and,
// of a VM, its placement: placement counts every VM of a location, whichever shard
// serves it, and nothing else reads them. So each of N shards holds about 1/N of the
// objects whole. A namespace selector cannot trim here: it needs the namespace's
// labels, which a transform has not.
func (s *Shard) TrimOthers(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok || s.count <= 1 || namespaceHash(o.GetNamespace())%uint32(s.count) == uint32(s.index) {
		return obj, nil
	}
	switch o := obj.(type) {
	case *banlieuev1.VirtualMachine:
		return &banlieuev1.VirtualMachine{TypeMeta: o.TypeMeta, ObjectMeta: identity(o), Status: banlieuev1.VirtualMachineStatus{Scheduled: o.Status.Scheduled}}, nil
	case *contract.Machine:
		return &contract.Machine{TypeMeta: o.TypeMeta, ObjectMeta: identity(o)}, nil
	}
	return obj, nil
}

// identity is the part of an object's metadata a trimmed copy keeps.
func identity(o client.Object) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), ResourceVersion: o.GetResourceVersion(),
		Generation: o.GetGeneration(), DeletionTimestamp: o.GetDeletionTimestamp(), OwnerReferences: o.GetOwnerReferences()}
}
