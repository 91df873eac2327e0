// Package intern makes the objects a controller caches share one copy of each string
// value. A decoded Kubernetes object holds a copy of every string of its JSON, and the
// strings of thousands of VMs and machines repeat: kinds, API versions, condition types,
// reasons and messages, classes, storage classes, Providers' names. Interned as they
// enter the cache, each value is held once for all the objects that carry it.
package intern

import (
	"reflect"
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
// so that equal strings share their bytes. obj must be a pointer, and not yet shared:
// it is changed in place. The canonical copies live as long as a string refers to
// them, so a value nothing holds any longer does not stay behind.
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
			v.SetString(unique.Make(v.String()).Value())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			walk(v.Elem())
		}
	case reflect.Interface:
		// An unstructured object's strings sit in interfaces, whose values cannot be
		// set in place: the interface is given the canonical string instead.
		if e := v.Elem(); e.Kind() == reflect.String && v.CanSet() {
			v.Set(reflect.ValueOf(unique.Make(e.String()).Value()).Convert(e.Type()))
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

// walkMap interns a map's keys and values. Assigning to a key that a map holds
// replaces the stored key too, so the map is changed in place, not rebuilt.
func walkMap(m reflect.Value) {
	if m.IsNil() {
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
