package intern

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
)

// labelled is an object with one map of strings, as a cache would hold it.
type labelled struct{ Labels map[string]string }

func TestMapsThatSpellAlikeJoinedStayTwo(t *testing.T) {
	// Joined naively, key and value of these read "a:b" alike; a tenant writes both.
	a := &labelled{Labels: map[string]string{"a:": "b"}}
	b := &labelled{Labels: map[string]string{"a": ":b"}}
	Strings(a)
	Strings(b)
	if reflect.ValueOf(a.Labels).Pointer() == reflect.ValueOf(b.Labels).Pointer() {
		t.Fatalf("two different maps were made one: %v", b.Labels)
	}
	if b.Labels["a"] != ":b" {
		t.Fatalf("the second map changed: %v", b.Labels)
	}
}

func TestTheTableOfSharedMapsStaysBounded(t *testing.T) {
	// A tenant can give every VM labels of its own; the table must not grow with them.
	for i := range 3 * maxSharedMaps {
		Strings(&labelled{Labels: map[string]string{"vm": fmt.Sprint(i)}})
	}
	sharedMaps.Lock()
	n := len(sharedMaps.byContent)
	sharedMaps.Unlock()
	if n > maxSharedMaps {
		t.Fatalf("the table holds %d maps, more than %d", n, maxSharedMaps)
	}
	// After a reset, what repeats is shared again.
	x, y := &labelled{Labels: map[string]string{"tier": "web"}}, &labelled{Labels: map[string]string{"tier": "web"}}
	Strings(x)
	Strings(y)
	if reflect.ValueOf(x.Labels).Pointer() != reflect.ValueOf(y.Labels).Pointer() {
		t.Fatalf("equal maps after the table filled up are two")
	}
}

func TestALongMapIsNotShared(t *testing.T) {
	long := func() *labelled {
		m := map[string]string{}
		for i := range maxSharedMapLen + 1 {
			m[fmt.Sprint("k", i)] = "v"
		}
		return &labelled{Labels: m}
	}
	a, b := long(), long()
	Strings(a)
	Strings(b)
	if reflect.ValueOf(a.Labels).Pointer() == reflect.ValueOf(b.Labels).Pointer() {
		t.Fatalf("a map of %d entries was shared", maxSharedMapLen+1)
	}
}

func TestInterningTwiceWritesNoMapAnObjectShares(t *testing.T) {
	// client-go's watch-list Replace runs the transform again on objects it already
	// ran it on; by then their small maps may be shared with objects in a cache.
	cached := &labelled{Labels: map[string]string{"team": "a"}}
	Strings(cached)
	again := &labelled{Labels: cached.Labels}
	shared := reflect.ValueOf(cached.Labels).Pointer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			Strings(again)
		}
	}()
	for range 1000 {
		_ = maps.Clone(cached.Labels) // a cache reader's deep copy
	}
	<-done
	if reflect.ValueOf(cached.Labels).Pointer() != shared || cached.Labels["team"] != "a" {
		t.Fatalf("the cached object's map changed: %v", cached.Labels)
	}
}
