package providersdk

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// copyAt is a reader that has the machine at one resourceVersion.
type copyAt string

func (rv copyAt) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	obj.SetResourceVersion(string(rv))
	return nil
}

func (copyAt) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// A machine is read from the cache unless the cache is older than the Reconciler's own
// last write to it; then it is read from the API server, and counted.
func TestReadMachineGoesLiveOnlyWhenTheCacheIsBehindItsOwnWrite(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "web-01"}
	tests := []struct {
		name    string
		written string // the resourceVersion of the Reconciler's last write; "" for none
		cached  string
		want    string
	}{
		{name: "never written: the cache", cached: "100", want: "100"},
		{name: "the cache holds the write", written: "100", cached: "100", want: "100"},
		{name: "the cache holds a later write", written: "100", cached: "120", want: "120"},
		{name: "the cache is behind the write", written: "100", cached: "99", want: "200"},
		{name: "a version that is not a number", written: "100", cached: "x7", want: "200"},
		{name: "a write whose version is not a number", written: "x7", cached: "120", want: "200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{class: "test-read", machines: copyAt(tt.cached), live: copyAt("200"), written: newWrittenVersions()}
			if tt.written != "" {
				w := &unstructured.Unstructured{}
				w.SetNamespace(key.Namespace)
				w.SetName(key.Name)
				w.SetResourceVersion(tt.written)
				r.written.wrote(w)
			}
			before := liveReads(t, r.class)
			u := &unstructured.Unstructured{}
			if err := r.readMachine(context.Background(), key, u); err != nil {
				t.Fatal(err)
			}
			if got := u.GetResourceVersion(); got != tt.want {
				t.Errorf("read the machine at %s, want %s", got, tt.want)
			}
			if live := liveReads(t, r.class) - before; live != map[bool]float64{true: 1, false: 0}[tt.want == "200"] {
				t.Errorf("%v live reads counted", live)
			}
			r.written.forget(key)
			if r.written.behind(key, "1") {
				t.Error("a forgotten machine is still behind")
			}
		})
	}
}

func liveReads(t *testing.T, class string) float64 {
	t.Helper()
	var m dto.Metric
	if err := machineLiveReads.WithLabelValues(class).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
