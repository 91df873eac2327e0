package providersdk

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// countingDriver counts connects and disconnects.
type countingDriver struct{ connects, disconnects int }

func (d *countingDriver) connect(context.Context) (Client, error) {
	d.connects++
	return ClientFns{DisconnectFn: func(context.Context) error { d.disconnects++; return nil }}, nil
}

func TestSessionCache(t *testing.T) {
	type counts struct{ Connects, Disconnects int }
	base := sessionKey{provider: "p1", generation: 1, secretVersion: "10"}
	for _, tc := range []struct {
		name string
		keys []sessionKey
		want counts
	}{
		{"the same Provider and Secret reuse one session", []sessionKey{base, base, base}, counts{1, 0}},
		{"an edited Provider reconnects", []sessionKey{base, {provider: "p1", generation: 2, secretVersion: "10"}}, counts{2, 1}},
		{"a rotated Secret reconnects", []sessionKey{base, {provider: "p1", generation: 1, secretVersion: "11"}}, counts{2, 1}},
		{"two Providers have a session each", []sessionKey{base, {provider: "p2", generation: 1}, base}, counts{2, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d := newSessionCache(), &countingDriver{}
			for _, k := range tc.keys {
				if _, err := c.get(context.Background(), k, d.connect); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, counts{d.connects, d.disconnects}); diff != "" {
				t.Errorf("connects and disconnects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSessionCacheForgetReconnects(t *testing.T) {
	c, d := newSessionCache(), &countingDriver{}
	k := sessionKey{provider: "p1", generation: 1}
	ctx := context.Background()
	if _, err := c.get(ctx, k, d.connect); err != nil {
		t.Fatal(err)
	}
	c.forget(ctx, "p1")
	if _, err := c.get(ctx, k, d.connect); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([2]int{2, 1}, [2]int{d.connects, d.disconnects}); diff != "" {
		t.Errorf("connects and disconnects (-want +got):\n%s", diff)
	}
}

func TestSessionCacheDoesNotKeepAFailedConnect(t *testing.T) {
	c := newSessionCache()
	k := sessionKey{provider: "p1", generation: 1}
	fail := errors.New("refused")
	if _, err := c.get(context.Background(), k, func(context.Context) (Client, error) { return nil, fail }); !errors.Is(err, fail) {
		t.Fatalf("got %v, want the connect error", err)
	}
	d := &countingDriver{}
	if _, err := c.get(context.Background(), k, d.connect); err != nil {
		t.Fatal(err)
	}
	if d.connects != 1 {
		t.Errorf("connects = %d, want 1: a failed connect must not be cached", d.connects)
	}
}

func TestSessionCacheCurrent(t *testing.T) {
	ctx := context.Background()
	c, d := newSessionCache(), &countingDriver{}
	if c.current("p1", 1) != nil {
		t.Fatal("a Provider never connected has a current session")
	}
	if _, err := c.get(ctx, sessionKey{provider: "p1", generation: 1, secretVersion: "10"}, d.connect); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		generation int64
		want       bool
	}{
		{"the generation it was opened for, whatever the Secret's version now", 1, true},
		{"an edited Provider has none until it reconnects", 2, false},
	} {
		if got := c.current("p1", tc.generation) != nil; got != tc.want {
			t.Errorf("%s: current = %t, want %t", tc.name, got, tc.want)
		}
	}
	c.forget(ctx, "p1")
	if c.current("p1", 1) != nil {
		t.Error("a forgotten session is still current")
	}
}
