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
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/ownwrites"
)

// A machine read from the API server because the cache is behind the Reconciler's own
// write (package ownwrites) is counted; one read from the cache is not.
func TestReadMachineCountsItsLiveReads(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "infrastructure.banlieue.io", Version: "v1alpha1", Kind: "TestMachine"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(gvk)
	stored.SetNamespace("team-a")
	stored.SetName("web-01")
	c := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(stored).Build()
	key := client.ObjectKeyFromObject(stored)
	if err := c.Get(context.Background(), key, stored); err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(stored.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		written uint64 // the version of the Reconciler's last write
		live    float64
	}{
		{name: "the cache holds the write", written: rv},
		{name: "the cache is behind the write", written: rv + 1, live: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{class: "test-read", machines: c, live: c, written: ownwrites.New()}
			w := stored.DeepCopy()
			w.SetResourceVersion(strconv.FormatUint(tt.written, 10))
			r.written.Wrote(w)
			before := liveReads(t, r.class)
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := r.readMachine(context.Background(), key, u); err != nil {
				t.Fatal(err)
			}
			if live := liveReads(t, r.class) - before; live != tt.live {
				t.Errorf("%v live reads counted, want %v", live, tt.live)
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
				if r.written.Len() != 0 {
					t.Errorf("recorded %d machines", r.written.Len())
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
			if r.written.Behind(key, stored.GetResourceVersion()) || !r.written.Behind(key, strconv.FormatUint(rv-1, 10)) {
				t.Errorf("not recorded as %s at %d", key, rv)
			}
		})
	}
}
