package sharding

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/go-logr/logr"
)

// clock is a registry's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newRegistry(t *testing.T, c client.Client, name string, at *clock) *Registry {
	t.Helper()
	r := New("example.io/shard", "kind", name, "", map[string]string{"example.io/part": name}, Timing{Renew: 10 * time.Second, Duration: 30 * time.Second})
	r.Bind(c, c, 0)
	r.now = at.now
	return r
}

func TestARegistrationIsFreshUntilARenewalPeriodBeforeOthersMayCallItExpired(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	// Whole seconds: a Lease keeps its renew time to the microsecond.
	at := &clock{t: time.Now().Truncate(time.Second)}
	r := newRegistry(t, c, "shard-a", at)
	if r.Registered() {
		t.Fatal("a shard that never registered says it is registered")
	}
	if err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: "shard-a"}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Labels["example.io/shard"] != "kind" || lease.Annotations["example.io/part"] != "shard-a" || ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 30 {
		t.Errorf("the registration Lease: labels %v, annotations %v, duration %v", lease.Labels, lease.Annotations, lease.Spec.LeaseDurationSeconds)
	}
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {19 * time.Second, true}, {20 * time.Second, false}, {time.Hour, false}} {
		at.t = lease.Spec.RenewTime.Add(tt.after)
		if got := r.Registered(); got != tt.want {
			t.Errorf("%s after the last renewal: registered %v, want %v", tt.after, got, tt.want)
		}
	}
}

func TestOthersAreTheLiveRegistrationsOfTheKindButThisOne(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	at := &clock{t: time.Now()}
	a, b, gone := newRegistry(t, c, "shard-a", at), newRegistry(t, c, "shard-b", at), newRegistry(t, c, "shard-gone", at)
	stranger := New("example.io/shard", "other-kind", "shard-x", "", nil, DefaultTiming)
	stranger.Bind(c, c, 0)
	for _, r := range []*Registry{a, b, stranger} {
		if err := r.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	gone.now = func() time.Time { return at.t.Add(-time.Minute) }
	if err := gone.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	others, err := a.Others(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(others))
	for _, l := range others {
		names = append(names, l.Name)
	}
	if len(names) != 1 || names[0] != "shard-b" {
		t.Errorf("shard-a sees %v, want [shard-b]: not itself, not an expired one, not another kind's", names)
	}
}

func TestAStoppingShardDeletesItsRegistrationOnlyWhileItHoldsIt(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	at := &clock{t: time.Now()}
	first, second := newRegistry(t, c, "shard-a", at), newRegistry(t, c, "shard-a", at)
	if err := first.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Another replica became the shard's leader and renewed the Lease since.
	if err := second.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: DefaultNamespace, Name: "shard-a"}
	first.release(logr.Discard())
	if err := c.Get(ctx, key, &coordinationv1.Lease{}); err != nil {
		t.Fatalf("the former holder deleted the new leader's registration: %v", err)
	}
	second.release(logr.Discard())
	if err := c.Get(ctx, key, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the holder's registration is still there as it stops: %v", err)
	}
}

func TestATimingMustOutliveTwoRenewals(t *testing.T) {
	for _, tt := range []struct {
		timing Timing
		ok     bool
	}{
		{DefaultTiming, true},
		{Timing{Renew: time.Second, Duration: 2 * time.Second}, true},
		{Timing{Renew: time.Second, Duration: time.Second}, false},
		{Timing{Renew: 0, Duration: time.Second}, false},
	} {
		if err := tt.timing.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: %v, want ok %v", tt.timing, err, tt.ok)
		}
	}
}
