// Package intern makes the objects a controller caches share one copy of each string
// value, and of each small map of strings. A decoded Kubernetes object holds a copy of
// every string and map of its JSON, and those of thousands of VMs and machines repeat:
// kinds, API versions, condition types, reasons and messages, classes, Providers'
// names; labels, label selectors, the storage and network targets of every disk and
// NIC. Interned as they enter the cache, each is held once for all the objects that
// carry it. A cache never changes the objects it holds (readers get copies), so they
// can share.
package intern

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Transform returns a cache transform that strips managedFields, which no controller
// reads, and interns the strings of what is left (Strings). Every cache of a banlieue
// controller is given it.
func Transform() toolscache.TransformFunc {
	strip := cache.TransformStripManagedFields()
	return func(obj any) (any, error) {
		obj, err := strip(obj)
		if err != nil {
			return nil, err
		}
		Strings(obj)
		return obj, nil
	}
}

// Strings replaces every string that obj reaches through its exported fields, slices,
// arrays, maps and pointers by the canonical copy of its value (Go's unique package),
// so that equal strings share their bytes, and every small map of strings by a map
// equal to it that an earlier object holds (shareMap). obj must be a pointer, and not
// yet shared: it is changed in place, and must not be changed after. The canonical
// strings live as long as a string refers to them, so a value nothing holds any longer
// does not stay behind.
func Strings(obj any) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	walk(v.Elem())
}

func walk(v reflect.Value) {
	if !holdsStrings(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.Set(canonical(v))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			walk(v.Elem())
		}
	case reflect.Interface:
		// An unstructured object's strings sit in interfaces, whose values cannot be
		// set in place: the interface is given the canonical string instead.
		if e := v.Elem(); e.Kind() == reflect.String && v.CanSet() {
			v.Set(canonical(e))
		} else if e.IsValid() {
			walk(e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i))
		}
	case reflect.Map:
		walkMap(v)
	}
}

// canonical is the canonical copy of the string s holds, of s's (string) type.
func canonical(s reflect.Value) reflect.Value {
	return reflect.ValueOf(unique.Make(s.String()).Value()).Convert(s.Type())
}

// walkMap interns a map's keys and values. A small map of strings is never written:
// it may be one that objects already share (client-go's watch-list Replace hands the
// transform objects it has transformed once already), so shareMap swaps it for a map
// of its own instead. Any other map is the object's own, and is interned in place:
// assigning to a key that a map holds replaces the stored key too.
func walkMap(m reflect.Value) {
	if m.IsNil() || shareMap(m) {
		return
	}
	kt, et := m.Type().Key(), m.Type().Elem()
	key, elem := reflect.New(kt).Elem(), reflect.New(et).Elem()
	for it := m.MapRange(); it.Next(); {
		key.Set(it.Key())
		elem.Set(it.Value())
		walk(key)
		walk(elem)
		m.SetMapIndex(key, elem)
	}
}

// holdsStrings says whether a value of type t can reach a string the walk would
// intern; it is what keeps the walk out of byte slices, numbers and times.
func holdsStrings(t reflect.Type) bool {
	if known, ok := typesHolding.Load(t); ok {
		return known.(bool)
	}
	// A recursive type is taken to hold strings while it is being decided.
	typesHolding.Store(t, true)
	holds := decideHoldsStrings(t)
	typesHolding.Store(t, holds)
	return holds
}

var typesHolding sync.Map // reflect.Type → bool

func decideHoldsStrings(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsStrings(t.Elem())
	case reflect.Map:
		return holdsStrings(t.Key()) || holdsStrings(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsStrings(f.Type) {
				return true
			}
		}
	}
	return false
}

// maxSharedMapLen is the most entries a map may have to be shared: labels, selectors
// and targets have a few; a longer map is more likely an object's own.
const maxSharedMapLen = 8

// maxSharedMaps bounds the table of shared maps. When it is full it starts again
// empty: the objects keep the maps they share, and what repeats fills it again.
const maxSharedMaps = 4096

// sharedMaps holds one map per distinct content of the small maps of strings seen.
var sharedMaps = struct {
	sync.Mutex
	byContent map[mapContent]reflect.Value
}{byContent: map[mapContent]reflect.Value{}}

type mapContent struct {
	t reflect.Type
	s string
}

// shareMap sets m, a field or element the walk reached, to the map held in sharedMaps
// with the same type and entries, or to a new map of its entries interned, which is
// then held there for those that come after. It reports whether m was such a map; it
// reads m and never writes to it.
func shareMap(m reflect.Value) bool {
	t := m.Type()
	if t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String || m.Len() > maxSharedMapLen || !m.CanSet() {
		return false
	}
	key := mapContent{t: t, s: contentOf(m)}
	sharedMaps.Lock()
	defer sharedMaps.Unlock()
	if shared, ok := sharedMaps.byContent[key]; ok {
		m.Set(shared)
		return true
	}
	if len(sharedMaps.byContent) >= maxSharedMaps {
		clear(sharedMaps.byContent)
	}
	own := reflect.MakeMapWithSize(t, m.Len())
	for it := m.MapRange(); it.Next(); {
		own.SetMapIndex(canonical(it.Key()), canonical(it.Value()))
	}
	sharedMaps.byContent[key] = own
	m.Set(own)
	return true
}

// contentOf spells a map of strings' entries in key order, each string prefixed by
// its length, so that two maps have the same spelling only when they are equal.
func contentOf(m reflect.Value) string {
	keys := make([]string, 0, m.Len())
	for it := m.MapRange(); it.Next(); {
		keys = append(keys, it.Key().String())
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		v := m.MapIndex(reflect.ValueOf(k).Convert(m.Type().Key())).String()
		for _, s := range []string{k, v} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}
