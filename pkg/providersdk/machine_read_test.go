package providersdk

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
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

// Every successful write of a machine of the Reconciler's kind, to its spec or its
// status, is recorded by the client it writes through; writes of other objects, and
// writes that failed, are not.
func TestEveryMachineWriteIsRecorded(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "TestMachine"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind("TestMachineList"), &unstructured.UnstructuredList{})
	if err := banlieuev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	machine := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace("team-a")
		u.SetName("web-01")
		return u
	}
	provider := &banlieuev1.Provider{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "dc1"}}
	key := client.ObjectKeyFromObject(machine())
	labelled := func(o client.Object) client.Patch {
		before := o.DeepCopyObject().(client.Object)
		o.SetLabels(map[string]string{"touched": "yes"})
		return client.MergeFrom(before)
	}
	tests := []struct {
		name     string
		write    func(ctx context.Context, c client.Client) error
		recorded bool
	}{
		{name: "a patch of the machine", recorded: true, write: func(ctx context.Context, c client.Client) error {
			u := machine()
			if err := c.Get(ctx, key, u); err != nil {
				return err
			}
			return c.Patch(ctx, u, labelled(u))
		}},
		{name: "an update of the machine", recorded: true, write: func(ctx context.Context, c client.Client) error {
			u := machine()
			if err := c.Get(ctx, key, u); err != nil {
				return err
			}
			u.SetLabels(map[string]string{"touched": "yes"})
			return c.Update(ctx, u)
		}},
		{name: "a patch of the machine's status", recorded: true, write: func(ctx context.Context, c client.Client) error {
			u := machine()
			if err := c.Get(ctx, key, u); err != nil {
				return err
			}
			before := u.DeepCopy()
			u.Object["status"] = map[string]any{"ready": true}
			return c.Status().Patch(ctx, u, client.MergeFrom(before))
		}},
		{name: "a patch of a Provider", write: func(ctx context.Context, c client.Client) error {
			p := provider.DeepCopy()
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			return c.Patch(ctx, p, labelled(p))
		}},
		{name: "a patch that failed", write: func(ctx context.Context, c client.Client) error {
			u := machine()
			u.SetName("web-02") // no such machine
			if err := c.Patch(ctx, u, labelled(u)); !apierrors.IsNotFound(err) {
				return fmt.Errorf("a patch of a machine that does not exist: %w", err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(machine(), provider.DeepCopy()).
				WithStatusSubresource(machine()).Build()
			r := NewReconciler(fake, gvk, nil)
			if err := tt.write(context.Background(), r.client); err != nil {
				t.Fatal(err)
			}
			if !tt.recorded {
				if len(r.written.rv) != 0 {
					t.Errorf("recorded %v", r.written.rv)
				}
				return
			}
			stored := machine()
			if err := fake.Get(context.Background(), key, stored); err != nil {
				t.Fatal(err)
			}
			// What is recorded is the version the write made: a copy one older is behind it.
			rv, err := strconv.ParseUint(stored.GetResourceVersion(), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if r.written.behind(key, stored.GetResourceVersion()) || !r.written.behind(key, strconv.FormatUint(rv-1, 10)) {
				t.Errorf("recorded %v, want %s at %d", r.written.rv, key, rv)
			}
		})
	}
}
