package providersdk

import (
	"context"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Cluster API's objects are read as unstructured objects of cluster.x-k8s.io/v1beta2:
// the SDK imports none of Cluster API's Go types, and a provider runs whether or not
// Cluster API is installed.
const (
	// ClusterAPIGroup is Cluster API's core API group.
	ClusterAPIGroup = "cluster.x-k8s.io"
	// ClusterNameLabel is the label Cluster API puts on the infrastructure machines it
	// makes for a Cluster, naming the Cluster (in the machine's namespace).
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// WatchFilterLabel is the label Cluster API's --watch-filter selects objects by: a
	// provider started with a watch filter reconciles only the machines, and acts only on
	// the Cluster API objects, that carry it with the filter's value.
	WatchFilterLabel = "cluster.x-k8s.io/watch-filter"
	// BootstrapDataKey is the key of a Cluster API bootstrap data Secret that holds the
	// payload.
	BootstrapDataKey = "value"
)

var (
	capiMachineGVK = schema.GroupVersionKind{Group: ClusterAPIGroup, Version: "v1beta2", Kind: "Machine"}
	capiClusterGVK = schema.GroupVersionKind{Group: ClusterAPIGroup, Version: "v1beta2", Kind: "Cluster"}
)

// clusterAPIRequeue is how soon a machine waiting on Cluster API objects is looked at
// again when they are not watched: their CRDs were not installed when the provider
// started, so no event tells when they change.
const clusterAPIRequeue = 30 * time.Second

// capiOwner returns the name of the Cluster API Machine among o's owners, of any
// version of the group; "" when there is none.
func capiOwner(o metav1.Object) string {
	for _, ref := range o.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == ClusterAPIGroup && ref.Kind == capiMachineGVK.Kind {
			return ref.Name
		}
	}
	return ""
}

// clusterAPI is what a machine's Cluster API objects say, read once per reconcile.
type clusterAPI struct {
	namespace string
	// ownerName is the owning Machine's name, "" when the machine has no such owner;
	// owner is that Machine, nil when it does not exist.
	ownerName string
	owner     *unstructured.Unstructured
	// clusterName is the Cluster's name, from the machine's label or else the Machine's
	// spec.clusterName; cluster is that Cluster, nil when it does not exist.
	clusterName string
	cluster     *unstructured.Unstructured
}

// readClusterAPI reads the Machine and Cluster of a machine Cluster API manages: one
// that has a Cluster API Machine owner or the ClusterNameLabel. It returns nil, having
// read nothing, for any other machine (core's, or one written by hand).
func (r *Reconciler) readClusterAPI(ctx context.Context, u *unstructured.Unstructured) (*clusterAPI, error) {
	c := &clusterAPI{namespace: u.GetNamespace(), ownerName: capiOwner(u), clusterName: u.GetLabels()[ClusterNameLabel]}
	if c.ownerName == "" && c.clusterName == "" {
		return nil, nil
	}
	var err error
	if c.ownerName != "" {
		if c.owner, err = r.getClusterAPI(ctx, capiMachineGVK, c.namespace, c.ownerName); err != nil {
			return nil, err
		}
		if c.clusterName == "" && c.owner != nil {
			c.clusterName, _, _ = unstructured.NestedString(c.owner.Object, "spec", "clusterName")
		}
	}
	if c.clusterName != "" {
		if c.cluster, err = r.getClusterAPI(ctx, capiClusterGVK, c.namespace, c.clusterName); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// getClusterAPI reads one Cluster API object; nil when it, or its kind, does not exist.
func (r *Reconciler) getClusterAPI(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.capi.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return u, nil
}

// paused says why the Cluster pauses the machine; "" when it does not.
func (c *clusterAPI) paused() string {
	if c == nil || c.cluster == nil {
		return ""
	}
	if p, _, _ := unstructured.NestedBool(c.cluster.Object, "spec", "paused"); p {
		return fmt.Sprintf("Cluster %s/%s is paused (spec.paused)", c.namespace, c.clusterName)
	}
	if _, ok := c.cluster.GetAnnotations()[PausedAnnotation]; ok {
		return fmt.Sprintf("Cluster %s/%s carries the annotation %s", c.namespace, c.clusterName, PausedAnnotation)
	}
	return ""
}

// waiting says what a machine that has no VM yet waits for before one is made, as a
// Ready reason and message; "" when it waits for nothing. The order is the contract's
// workflow: adoption by a Machine, the Cluster's infrastructure, the bootstrap data.
func (c *clusterAPI) waiting() (reason, message string) {
	switch {
	case c == nil:
		return "", ""
	case c.ownerName == "":
		return infrav1.MachineWaitingForMachineOwnerReason, fmt.Sprintf(
			"the machine carries the label %s=%s but Cluster API's Machine controller has not adopted it yet (no ownerReference to a %s Machine)",
			ClusterNameLabel, c.clusterName, ClusterAPIGroup)
	case c.owner == nil:
		return infrav1.MachineWaitingForMachineOwnerReason, fmt.Sprintf("Machine %s/%s, the machine's owner, does not exist", c.namespace, c.ownerName)
	case c.clusterName == "":
		// An owner that names no Cluster: nothing to wait for on the Cluster's side.
	case c.cluster == nil:
		return infrav1.MachineWaitingForClusterInfrastructureReason, fmt.Sprintf("Cluster %s/%s does not exist", c.namespace, c.clusterName)
	case !infrastructureProvisioned(c.cluster):
		return infrav1.MachineWaitingForClusterInfrastructureReason, fmt.Sprintf(
			"Cluster %s/%s's status.initialization.infrastructureProvisioned is not true yet", c.namespace, c.clusterName)
	}
	if c.dataSecretName() == "" {
		return infrav1.MachineWaitingForBootstrapDataReason, fmt.Sprintf(
			"Machine %s/%s has no spec.bootstrap.dataSecretName yet: its bootstrap provider has not written the bootstrap data", c.namespace, c.ownerName)
	}
	return "", ""
}

// dataSecretName is the owning Machine's spec.bootstrap.dataSecretName; "" when unset.
func (c *clusterAPI) dataSecretName() string {
	if c == nil || c.owner == nil {
		return ""
	}
	name, _, _ := unstructured.NestedString(c.owner.Object, "spec", "bootstrap", "dataSecretName")
	return name
}

// apply gives the machine, in memory only, what its owning Machine decides: the
// bootstrap data Secret's "value" as user data, in place of spec.userData, and the
// Machine's failure domain when the machine's own spec.failureDomain is empty (when
// both are set the machine's own wins). It returns the Machine's reference for
// user-data messages, "" when the bootstrap data is not used.
func (c *clusterAPI) apply(m *Machine) string {
	if c == nil || c.owner == nil {
		return ""
	}
	if m.Spec.FailureDomain == "" {
		m.Spec.FailureDomain, _, _ = unstructured.NestedString(c.owner.Object, "spec", "failureDomain")
	}
	name := c.dataSecretName()
	if name == "" {
		return ""
	}
	m.Spec.UserData = &banlieuev1.UserData{SecretRef: banlieuev1.LocalObjectReference{Name: name}, Key: BootstrapDataKey}
	return c.namespace + "/" + c.ownerName
}

// infrastructureProvisioned reports the Cluster's status.initialization.infrastructureProvisioned.
func infrastructureProvisioned(cluster *unstructured.Unstructured) bool {
	ok, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
	return ok
}

// waitRequeue is the requeue of a machine waiting on Cluster API objects: none when
// they are watched, whose events wake it, clusterAPIRequeue otherwise.
func (r *Reconciler) waitRequeue() time.Duration {
	if r.capiWatched {
		return 0
	}
	return clusterAPIRequeue
}

// clusterAPIInstalled reports whether the API server serves Cluster API's v1beta2
// Machine and Cluster.
func clusterAPIInstalled(mapper meta.RESTMapper) (bool, error) {
	return kindsServed(mapper, capiMachineGVK, capiClusterGVK)
}

// kindsServed reports whether mapper knows every one of gvks.
func kindsServed(mapper meta.RESTMapper, gvks ...schema.GroupVersionKind) (bool, error) {
	for _, gvk := range gvks {
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				return false, nil
			}
			return false, fmt.Errorf("failed to look up %s: %w", gvk, err)
		}
	}
	return true, nil
}

// machineOfCAPIMachine maps a Cluster API Machine to the infrastructure machine its
// spec.infrastructureRef names, when that is of the Reconciler's kind.
func (r *Reconciler) machineOfCAPIMachine(_ context.Context, o client.Object) []reconcile.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "infrastructureRef")
	if ref["apiGroup"] != r.gvk.Group || ref["kind"] != r.gvk.Kind || ref["name"] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: u.GetNamespace(), Name: ref["name"]}}}
}

// machinesOfCluster maps a Cluster to the machines of the Reconciler's kind that carry
// its ClusterNameLabel, listed from the cache.
func (r *Reconciler) machinesOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.machines.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{ClusterNameLabel: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list machines of Cluster", "Cluster", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// capiMachineChangeWakesMachine reports whether a Machine update changed what its
// infrastructure machine acts on: its spec (the bootstrap data Secret, the failure
// domain, the infrastructureRef) or its deletion. Cluster API rewrites the Machine's
// status often; those writes wake nothing.
func capiMachineChangeWakesMachine(e event.UpdateEvent) bool {
	return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		!e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
}

// clusterChangeWakesMachines reports whether a Cluster update changed what its
// machines act on: its spec (spec.paused), its annotations (the paused annotation), its
// deletion or status.initialization.infrastructureProvisioned. Its other status writes,
// frequent, wake nothing.
func clusterChangeWakesMachines(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*unstructured.Unstructured)
	c, okNew := e.ObjectNew.(*unstructured.Unstructured)
	if !okOld || !okNew {
		return true
	}
	return old.GetGeneration() != c.GetGeneration() || !maps.Equal(old.GetAnnotations(), c.GetAnnotations()) ||
		!old.GetDeletionTimestamp().Equal(c.GetDeletionTimestamp()) || infrastructureProvisioned(old) != infrastructureProvisioned(c)
}
