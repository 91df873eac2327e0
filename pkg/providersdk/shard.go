package providersdk

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
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
	DefaultShardNamespace = "banlieue-system"
)

// Shard lease timing: renewed every shardRenew, and live for shardLease after its last
// renewal, so a shard whose process is gone stops counting within that time.
// The shards' Leases are listed at most every shardListTTL, however many machines ask.
const (
	shardRenew   = 30 * time.Second
	shardLease   = 90 * time.Second
	shardListTTL = 10 * time.Second
)

// Shard is the part of its class's Providers a provider process serves.
type Shard struct {
	class string
	// selector matches the Providers served; text is it as given ("" for all).
	selector labels.Selector
	text     string
	// name and namespace are the shard's Lease.
	name, namespace string
	// holder names this process in the Lease.
	holder string
	// leases reads the shards' Leases (the manager's API reader); client writes this one.
	leases client.Reader
	client client.Client
	now    func() time.Time

	// mu guards listed and listedAt: the last listing, kept for listTTL.
	mu       sync.Mutex
	listed   []coordinationv1.Lease
	listedAt time.Time
	listTTL  time.Duration
}

// NewShard returns the shard of class that selector (label selector syntax, "" for all
// the class's Providers) describes, registered in namespace (DefaultShardNamespace when
// empty). Setup makes it from Config, reads the shards' Leases from the manager's cache
// and adds it to the manager, which runs its registration on the leader.
func NewShard(class, selector, namespace string) (*Shard, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("provider selector %q does not parse: %w", selector, err)
	}
	host, _ := os.Hostname()
	return &Shard{
		class: class, selector: sel, text: selector,
		name: ShardLeaseName(class, selector), namespace: cmp.Or(namespace, DefaultShardNamespace),
		holder: host + "_" + string(uuid.NewUUID()), now: time.Now, listTTL: shardListTTL,
	}, nil
}

// ShardLeaseName is the name of the Lease that registers the shard of class with
// selector: "banlieue-shard-<class>-<12 hex digits of the selector's SHA-256>".
func ShardLeaseName(class, selector string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(selector)))
	return "banlieue-shard-" + class + "-" + hex.EncodeToString(sum[:6])
}

// matches reports whether p is of the shard's class and its selector matches it.
func (s *Shard) matches(p *banlieuev1.Provider) bool {
	return p.Spec.ProviderClassRef.Name == s.class && s.selector.Matches(labels.Set(p.Labels))
}

// conflicts returns the other live shards of the class whose selectors match p, as
// "<lease> (<selector>)", sorted; none when the shard alone serves it.
func (s *Shard) conflicts(ctx context.Context, p *banlieuev1.Provider) ([]string, error) {
	leases, err := s.shards(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range leases {
		l := &leases[i]
		if l.Name == s.name || !s.live(l) {
			continue
		}
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

// shards lists the Leases of the class's shards, or returns the listing made within
// listTTL.
func (s *Shard) shards(ctx context.Context) ([]coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.listedAt.IsZero() && s.now().Sub(s.listedAt) < s.listTTL {
		return s.listed, nil
	}
	list := &coordinationv1.LeaseList{}
	if err := s.leases.List(ctx, list, client.InNamespace(s.namespace), client.MatchingLabels{ShardLabel: s.class}); err != nil {
		return nil, fmt.Errorf("failed to list the provider shards: %w", err)
	}
	s.listed, s.listedAt = list.Items, s.now()
	return s.listed, nil
}

// shardDescription names a shard for a message.
func shardDescription(lease, selector string) string {
	if selector == "" {
		return lease + " (every Provider of the class)"
	}
	return lease + " (" + selector + ")"
}

// live reports whether the Lease l was renewed within its duration.
func (s *Shard) live(l *coordinationv1.Lease) bool {
	if l.Spec.RenewTime == nil {
		return false
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, int32(shardLease/time.Second))) * time.Second
	return s.now().Before(l.Spec.RenewTime.Add(d))
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
		"until one of their --provider-selector no longer matches its labels", shardDescription(s.name, s.text), strings.Join(others, ", ")), nil
}

// Start registers the shard and renews its Lease until ctx ends; a failed renewal is
// logged and tried again at the next period. It runs on the leader only.
func (s *Shard) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("shard", s.name)
	for {
		if err := s.renew(ctx); err != nil {
			log.Info("Failed to renew the provider shard's Lease", "err", redact.Text(err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(shardRenew):
		}
	}
}

// NeedLeaderElection makes Start run on the elected leader only.
func (s *Shard) NeedLeaderElection() bool { return true }

// renew creates the shard's Lease, or renews it.
func (s *Shard) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(s.now())
	l := &coordinationv1.Lease{}
	err := s.leases.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name,
				Labels: map[string]string{ShardLabel: s.class}, Annotations: map[string]string{ShardSelectorAnnotation: s.text}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &s.holder, LeaseDurationSeconds: ptr.To(int32(shardLease / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}
		return s.client.Create(ctx, l)
	}
	if err != nil {
		return err
	}
	before := l.DeepCopy()
	l.Labels = mergeMap(l.Labels, ShardLabel, s.class)
	l.Annotations = mergeMap(l.Annotations, ShardSelectorAnnotation, s.text)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &s.holder, ptr.To(int32(shardLease/time.Second)), &now
	return s.client.Patch(ctx, l, client.MergeFrom(before))
}

// mergeMap returns m with key set to value.
func mergeMap(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}
