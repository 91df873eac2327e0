package virtualmachine

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/contract"
)

// A VM whose machine changed is reconciled before the VMs its users created or
// changed meanwhile, but a machine of a cache's initial list stays behind them.
func TestAMachinesProgressComesBeforeNewVMs(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := banlieuev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(banlieuev1.GroupVersion.WithKind("VirtualMachine"), meta.RESTScopeNamespace)
	h := withMachineProgressPriority(handler.EnqueueRequestForOwner(scheme, mapper, &banlieuev1.VirtualMachine{}, handler.OnlyControllerOwner()))

	machine := func(rv string) *contract.Machine {
		return &contract.Machine{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "placed", ResourceVersion: rv,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: banlieuev1.GroupVersion.String(), Kind: "VirtualMachine", Name: "placed", UID: "u", Controller: ptr.To(true),
			}},
		}}
	}
	placed := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "placed"}}
	created := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "created"}}
	for _, tt := range []struct {
		name  string
		event func(context.Context, priorityqueue.PriorityQueue[reconcile.Request])
		first reconcile.Request
	}{
		{name: "the machine changed", first: placed, event: func(ctx context.Context, q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: machine("1"), ObjectNew: machine("2")}, q)
		}},
		{name: "the machine was deleted", first: placed, event: func(ctx context.Context, q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Delete(ctx, event.DeleteEvent{Object: machine("2")}, q)
		}},
		{name: "the machine is in the cache's initial list", first: created, event: func(ctx context.Context, q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: machine("1"), IsInInitialList: true}, q)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("test")
			defer q.ShutDown()
			q.Add(created) // as a VM's creation enqueues it
			tt.event(context.Background(), q)
			if got, _ := q.Get(); got != tt.first {
				t.Errorf("first reconciled %v, want %v", got, tt.first)
			}
		})
	}
}
