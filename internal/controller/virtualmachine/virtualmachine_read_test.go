package virtualmachine

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// A VM whose cached copy is older than core's own last write of it is read again from
// the API server, so that what the write stored is not written a second time.
func TestACacheBehindCoresWriteCostsNoSecondWrite(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := banlieuev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	created := &banlieuev1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm"},
		Spec:       banlieuev1.VirtualMachineSpec{Paused: ptr.To(true)},
	}
	var cached *banlieuev1.VirtualMachine // what the cache holds; the stored VM when nil
	writes := 0
	store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(created).WithStatusSubresource(created).Build()
	c := interceptor.NewClient(store, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if cached == nil {
				return c.Get(ctx, key, obj, opts...)
			}
			cached.DeepCopyInto(obj.(*banlieuev1.VirtualMachine))
			return nil
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}
	r.readOwnWrites(store)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(created)}
	stored := func() *banlieuev1.VirtualMachine {
		vm := &banlieuev1.VirtualMachine{}
		if err := store.Get(context.Background(), req.NamespacedName, vm); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	reconcile := func(want int) {
		t.Helper()
		writes = 0
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if writes != want {
			t.Errorf("%d writes, want %d", writes, want)
		}
	}

	cached = stored() // the cache's copy from before the first reconcile
	reconcile(2)      // the finalizer, then the status: Pending
	if got := stored().Status.Phase; got != banlieuev1.PhasePending {
		t.Fatalf("phase %q, want Pending", got)
	}
	reconcile(0) // the cache still holds the VM as created
	cached = nil // the cache caught up
	reconcile(0)
}
