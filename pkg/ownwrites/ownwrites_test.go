package ownwrites

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// copyAt is a reader that has every object at one resourceVersion.
type copyAt string

func (rv copyAt) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	obj.SetResourceVersion(string(rv))
	return nil
}

func (copyAt) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// An object is read from the cache unless the cache's copy is older than the
// controller's own last write of it; then it is read live.
func TestGetGoesLiveOnlyWhenTheCacheIsBehindTheOwnWrite(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "web-01"}
	for _, tt := range []struct {
		name    string
		written string // the resourceVersion of the last write; "" for none
		cached  string
		want    string
	}{
		{name: "never written: the cache", cached: "100", want: "100"},
		{name: "the cache holds the write", written: "100", cached: "100", want: "100"},
		{name: "the cache holds a later write", written: "100", cached: "120", want: "120"},
		{name: "the cache is behind the write", written: "100", cached: "99", want: "200"},
		{name: "a version that is not a number", written: "100", cached: "x7", want: "200"},
		{name: "a write whose version is not a number", written: "x7", cached: "120", want: "200"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := New()
			if tt.written != "" {
				o := &unstructured.Unstructured{}
				o.SetNamespace(key.Namespace)
				o.SetName(key.Name)
				o.SetResourceVersion(tt.written)
				w.Wrote(o)
			}
			u := &unstructured.Unstructured{}
			live, err := w.Get(context.Background(), copyAt(tt.cached), copyAt("200"), key, u)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.GetResourceVersion(); got != tt.want || live != (tt.want == "200") {
				t.Errorf("read at %s (live %v), want %s", got, live, tt.want)
			}
			w.Forget(key)
			if w.Behind(key, "1") {
				t.Error("a forgotten object is still behind")
			}
		})
	}
}

// appliedAt is a client whose Apply answers with the object at one resourceVersion, as
// the API server's answer is read into an unstructured apply configuration.
type appliedAt struct {
	client.Client
	rv string
}

func (c appliedAt) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	obj.(client.Object).SetResourceVersion(c.rv)
	return nil
}

// A server-side apply is a write like any other: the object it leaves is read from live
// while the cache is behind it, through the Reader as through Get.
func TestAnApplyIsRecordedAndTheReaderReadsPastIt(t *testing.T) {
	w := New()
	c := NewClient(appliedAt{rv: "150"}, w, func(client.Object) bool { return true })
	u := &unstructured.Unstructured{}
	u.SetNamespace("team-a")
	u.SetName("web-01")
	if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u)); err != nil {
		t.Fatal(err)
	}
	r := w.Reader(copyAt("120"), copyAt("200"))
	got := &unstructured.Unstructured{}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != "200" {
		t.Errorf("read at %s with the cache at 120 behind the apply at 150, want the live 200", got.GetResourceVersion())
	}
}
