package provider

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	testv1 "github.com/banlieue/banlieue/test/provider/api/v1alpha1"
)

// Finalizer is the test provider's finalizer on its machines.
const Finalizer = "infrastructure.test.banlieue.io/testmachine"

// ProviderClass is the provider class the test provider serves.
const ProviderClass = "test"

// MachineKind is what a Provider of the test class publishes in status.machineKind.
var MachineKind = banlieuev1.MachineKind{APIGroup: testv1.GroupVersion.Group, Version: testv1.GroupVersion.Version, Kind: "TestMachine"}

// Reconciler fulfils TestMachines: it writes a providerID, an address, the asked-for
// power state and Ready, and releases deleted machines unless they are held.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&testv1.TestMachine{}).Complete(r)
}

// Reconcile fulfils one TestMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &testv1.TestMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := m.DeepCopy()
	if !m.DeletionTimestamp.IsZero() {
		if _, held := m.Annotations[testv1.HoldDeletionAnnotation]; held {
			return ctrl.Result{}, nil
		}
		controllerutil.RemoveFinalizer(m, Finalizer)
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, m, client.MergeFrom(before)))
	}
	if controllerutil.AddFinalizer(m, Finalizer) || m.Spec.ProviderID == "" {
		m.Spec.ProviderID = "test://" + string(m.UID)
		if err := r.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to patch TestMachine: %w", err)
		}
		before = m.DeepCopy()
	}
	p := &banlieuev1.Provider{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Spec.ProviderRef.Namespace, Name: m.Spec.ProviderRef.Name}, p); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get Provider: %w", err)
	}
	if p.Spec.Parameters[testv1.HoldReadyParameter] == "true" {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
			Type: banlieuev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "Cloning", Message: "clone in progress", ObservedGeneration: m.Generation,
		})
		return ctrl.Result{}, r.patchStatus(ctx, before, m)
	}
	m.Status.Initialization.Provisioned = ptr.To(true)
	m.Status.FailureDomain = m.Spec.FailureDomain
	m.Status.PowerState = m.Spec.PowerState
	m.Status.Addresses = []banlieuev1.MachineAddress{{Type: banlieuev1.MachineInternalIP, Address: "192.0.2.10"}}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", ObservedGeneration: m.Generation,
	})
	m.Status.ObservedGeneration = m.Generation
	return ctrl.Result{}, r.patchStatus(ctx, before, m)
}

func (r *Reconciler) patchStatus(ctx context.Context, before, m *testv1.TestMachine) error {
	if equality.Semantic.DeepEqual(before.Status, m.Status) {
		return nil
	}
	return r.Client.Status().Patch(ctx, m, client.MergeFrom(before))
}
