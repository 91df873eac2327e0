// Package sharding is how banlieue's processes divide work without a coordinator of their
// own: each shard (a provider process serving part of its class's Providers, a core
// instance serving part of the namespaces) registers itself with a Lease that its
// leader renews, annotated with what it serves. A shard acts on an object only when its
// own registration is fresh and no other live shard of its kind claims the object too;
// an object two shards claim waits, held by both, until one of them is gone. Kubernetes
// Leases are the same primitive its leader election uses, so a shard needs no other
// store, and an operator sees every shard with `kubectl get leases`.
package sharding

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/pkg/redact"
)

// DefaultNamespace is where shards register when none is given: the namespace
// banlieue's processes run in.
const DefaultNamespace = "banlieue-system"

// Default timing: a registration is renewed every DefaultRenew and is live for
// DefaultDuration after its last renewal, so a shard whose process is gone stops
// counting within that time; the shards' Leases are listed at most every
// DefaultListTTL, however many objects ask.
const (
	DefaultRenew    = 30 * time.Second
	DefaultDuration = 90 * time.Second
	DefaultListTTL  = 10 * time.Second
)

// Timing is how often a registration is renewed and how long it lives.
type Timing struct {
	// Renew is the period of renewals; Duration how long a registration lives after
	// the last. Duration is more than Renew, or one late renewal would expire it.
	Renew, Duration time.Duration
}

// DefaultTiming is the timing of DefaultRenew and DefaultDuration.
var DefaultTiming = Timing{Renew: DefaultRenew, Duration: DefaultDuration}

// Validate says what is wrong with t, if anything.
func (t Timing) Validate() error {
	if t.Renew <= 0 || t.Duration < 2*t.Renew {
		return fmt.Errorf("a shard's registration must live at least two renewal periods (renewed every %s, live for %s)", t.Renew, t.Duration)
	}
	return nil
}

// Registry is one shard's registration, and its view of the other shards of its kind.
type Registry struct {
	// label=value labels the Leases of the kind's shards.
	label, value string
	// name and namespace are this shard's Lease; annotations say what it serves.
	name, namespace string
	annotations     map[string]string
	// holder names this process in the Lease.
	holder string
	timing Timing

	// reader reads the shards' Leases (uncached: they are few, and listed at most every
	// listTTL); writer writes this one.
	reader client.Reader
	writer client.Client
	now    func() time.Time

	// mu guards what follows: the last listing, kept for listTTL, and the time of this
	// shard's last successful renewal.
	mu       sync.Mutex
	listed   []coordinationv1.Lease
	listedAt time.Time
	listTTL  time.Duration
	renewed  time.Time
}

// New returns the registration of the shard named name in namespace (DefaultNamespace
// when empty), of the kind whose Leases are labelled label=value, with annotations
// saying what it serves. Bind gives it its clients.
func New(label, value, name, namespace string, annotations map[string]string, timing Timing) *Registry {
	host, _ := os.Hostname()
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &Registry{
		label: label, value: value, name: name, namespace: namespace, annotations: annotations,
		holder: host + "_" + string(uuid.NewUUID()), timing: timing, now: time.Now, listTTL: DefaultListTTL,
	}
}

// Name is the name of the shard's Lease, built by LeaseName.
func (r *Registry) Name() string { return r.name }

// LeaseName is "<prefix>-<12 hex digits of the SHA-256 of what>": a shard's Lease name,
// the same for every process that serves the same part, and a valid object name
// whatever what holds.
func LeaseName(prefix, what string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(what)))
	return prefix + "-" + hex.EncodeToString(sum[:6])
}

// Bind makes the registry read the shards' Leases with reader and write its own with
// writer, listing them at most every listTTL, or every renewal period when that is
// shorter; listTTL 0 reads them afresh every time (for tests).
func (r *Registry) Bind(reader client.Reader, writer client.Client, listTTL time.Duration) {
	r.reader, r.writer, r.listTTL = reader, writer, min(listTTL, r.timing.Renew)
}

// Recheck is how long a shard that holds an object back waits before it looks again:
// the age a listing may have, so the next look sees the shards as they are by then.
func (r *Registry) Recheck() time.Duration { return max(r.listTTL, time.Second) }

// Others returns the live Leases of the kind's other shards, from a listing made
// within the list TTL.
func (r *Registry) Others(ctx context.Context) ([]coordinationv1.Lease, error) {
	all, err := r.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []coordinationv1.Lease
	for i := range all {
		if l := &all[i]; l.Name != r.name && r.live(l) {
			out = append(out, *l)
		}
	}
	return out, nil
}

// list lists the kind's Leases, or returns the listing made within listTTL.
func (r *Registry) list(ctx context.Context) ([]coordinationv1.Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.listedAt.IsZero() && r.now().Sub(r.listedAt) < r.listTTL {
		return r.listed, nil
	}
	list := &coordinationv1.LeaseList{}
	if err := r.reader.List(ctx, list, client.InNamespace(r.namespace), client.MatchingLabels{r.label: r.value}); err != nil {
		return nil, fmt.Errorf("failed to list the shards' Leases in %s: %w", r.namespace, err)
	}
	r.listed, r.listedAt = list.Items, r.now()
	return r.listed, nil
}

// live reports whether the Lease l was renewed within its duration.
func (r *Registry) live(l *coordinationv1.Lease) bool {
	if l.Spec.RenewTime == nil {
		return false
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, int32(r.timing.Duration/time.Second))) * time.Second
	return r.now().Before(l.Spec.RenewTime.Add(d))
}

// Registered reports whether this shard's own registration is fresh: renewed by this
// process less than Duration − Renew ago. A shard that cannot renew stops acting a
// renewal period before the others may take its registration for expired, so a
// process cut off from the API server never acts beside its successor.
func (r *Registry) Registered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.renewed.IsZero() && r.now().Sub(r.renewed) < r.timing.Duration-r.timing.Renew
}

// Start registers the shard and renews its Lease until ctx ends, then deletes it so
// that a successor does not wait for it to expire. A failed renewal is logged and
// tried again at the next period. It runs on the leader only.
func (r *Registry) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("shard", r.name)
	for {
		if err := r.Renew(ctx); err != nil {
			log.Info("Failed to renew the shard's Lease", "err", redact.Text(err.Error()))
		}
		select {
		case <-ctx.Done():
			r.release(log)
			return nil
		case <-time.After(r.timing.Renew):
		}
	}
}

// NeedLeaderElection makes Start run on the elected leader only.
func (r *Registry) NeedLeaderElection() bool { return true }

// Renew creates the shard's Lease, or renews it.
func (r *Registry) Renew(ctx context.Context) error {
	now := metav1.NewMicroTime(r.now())
	l := &coordinationv1.Lease{}
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, l)
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: r.name,
				Labels: map[string]string{r.label: r.value}, Annotations: maps.Clone(r.annotations)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &r.holder, LeaseDurationSeconds: ptr.To(int32(r.timing.Duration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}
		err = r.writer.Create(ctx, l)
	case err == nil:
		before := l.DeepCopy()
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[r.label] = r.value
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		maps.Copy(l.Annotations, r.annotations)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &r.holder, ptr.To(int32(r.timing.Duration/time.Second)), &now
		err = r.writer.Patch(ctx, l, client.MergeFrom(before))
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.renewed = now.Time
	r.mu.Unlock()
	return nil
}

// release deletes the shard's Lease if this process still holds it: another replica
// that has become the shard's leader since keeps its registration.
func (r *Registry) release(log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := &coordinationv1.Lease{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, l); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != r.holder {
		return
	}
	if err := r.writer.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion}); client.IgnoreNotFound(err) != nil {
		log.Info("Failed to release the shard's Lease; it expires on its own", "err", redact.Text(err.Error()))
	}
}
