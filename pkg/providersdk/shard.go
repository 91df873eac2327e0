package providersdk

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/sharding"
)

// Provider shards: a provider process serves the Providers of its class that match its
// Provider selector (Config.ProviderSelector, the --provider-selector flag), so that an
// operator runs one Deployment per vCenter or per group of Proxmox VE clusters. Each
// shard registers itself with a Lease in ShardNamespace, labelled ShardLabel with its
// class and annotated with its selector, which its leader renews. A Provider that the
// selectors of two live shards of its class match is served by neither: both report it
// Ready=False, reason ShardConflict, and leave it and its machines alone until one
// selector no longer matches, so two processes never act on one Provider.

const (
	// ShardLabel labels the Leases that register provider shards; its value is the class.
	ShardLabel = "banlieue.io/provider-shard"
	// ShardSelectorAnnotation holds a shard's Provider selector on its Lease; "" (all
	// the class's Providers) when the shard has none.
	ShardSelectorAnnotation = "banlieue.io/provider-selector"
	// DefaultShardNamespace is where shards register when Config.ShardNamespace is empty:
	// the namespace banlieue's processes run in.
	DefaultShardNamespace = sharding.DefaultNamespace
)

// Shard is the part of its class's Providers a provider process serves.
type Shard struct {
	class string
	// selector matches the Providers served; text is it as given ("" for all).
	selector labels.Selector
	text     string
	// registry is the shard's registration Lease and its view of the class's others.
	registry *sharding.Registry
}

// NewShard returns the shard of class that selector (label selector syntax, "" for all
// the class's Providers) describes, registered in namespace (sharding.DefaultNamespace
// when empty). Setup makes it from Config and adds its registration to the manager,
// which renews it on the leader.
func NewShard(class, selector, namespace string) (*Shard, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("provider selector %q does not parse: %w", selector, err)
	}
	return &Shard{
		class: class, selector: sel, text: selector,
		registry: sharding.New(ShardLabel, class, ShardLeaseName(class, selector), cmp.Or(namespace, DefaultShardNamespace),
			map[string]string{ShardSelectorAnnotation: selector}, sharding.DefaultTiming),
	}, nil
}

// ShardLeaseName is the name of the Lease that registers the shard of class with
// selector: "banlieue-shard-<class>-<12 hex digits of the selector's SHA-256>".
func ShardLeaseName(class, selector string) string {
	return sharding.LeaseName("banlieue-shard-"+class, selector)
}

// matches reports whether p is of the shard's class and its selector matches it.
func (s *Shard) matches(p *banlieuev1.Provider) bool {
	return p.Spec.ProviderClassRef.Name == s.class && s.selector.Matches(labels.Set(p.Labels))
}

// conflicts returns the other live shards of the class whose selectors match p, as
// "<lease> (<selector>)", sorted; none when the shard alone serves it.
func (s *Shard) conflicts(ctx context.Context, p *banlieuev1.Provider) ([]string, error) {
	others, err := s.registry.Others(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list the provider shards: %w", err)
	}
	var out []string
	for i := range others {
		l := &others[i]
		text := l.Annotations[ShardSelectorAnnotation]
		sel, err := labels.Parse(text)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, shardDescription(l.Name, text))
	}
	slices.Sort(out)
	return out, nil
}

// shardDescription names a shard for a message.
func shardDescription(lease, selector string) string {
	if selector == "" {
		return lease + " (every Provider of the class)"
	}
	return lease + " (" + selector + ")"
}

// serves reports whether the shard acts on p: p matches it and no other live shard's
// selector matches p. conflict, when not empty, is the ShardConflict message.
func (s *Shard) serves(ctx context.Context, p *banlieuev1.Provider) (ok bool, conflict string, err error) {
	if !s.matches(p) {
		return false, "", nil
	}
	others, err := s.conflicts(ctx, p)
	if err != nil || len(others) == 0 {
		return err == nil, "", err
	}
	return false, fmt.Sprintf("the Provider is matched by provider shards %s and %s; none acts on it, nor on its machines, "+
		"until one of their --provider-selector no longer matches its labels", shardDescription(s.registry.Name(), s.text), strings.Join(others, ", ")), nil
}
