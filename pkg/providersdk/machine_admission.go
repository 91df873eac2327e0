package providersdk

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// Admission: a machine may be written by anyone allowed to create machines in its
// namespace (a tenant, Cluster API), not only by core, so before any backend call the
// Reconciler checks that the machine asks only for what its Provider offers that
// namespace. Core's machines pass unchanged: core copies exactly what is checked here.
// A refusal is Ready=False with reason NotPermitted, retried with backoff, whose message
// names only the machine's own Provider and its own fields, never what other Providers
// offer.

// admit checks the machine against its Provider: the Provider is of the driver's class
// and admits the machine's namespace, and the failure domain, storage and network
// targets are ones the Provider publishes. A Provider being deleted takes no new VM.
func (r *Reconciler) admit(ctx context.Context, p *banlieuev1.Provider, m *Machine) error {
	ref := fmt.Sprintf("Provider %s/%s", p.Namespace, p.Name)
	if r.class != "" && p.Spec.ProviderClassRef.Name != r.class {
		return notPermitted("%s is of provider class %q, not %q: a %s cannot run on it", ref, p.Spec.ProviderClassRef.Name, r.class, r.gvk.Kind)
	}
	if !p.DeletionTimestamp.IsZero() && m.Spec.ProviderID == "" {
		return notPermitted("%s is being deleted and takes no new VM; place the VM on another Provider", ref)
	}
	if err := r.admitNamespace(ctx, p, m.Namespace); err != nil {
		return err
	}
	if fd := m.Spec.FailureDomain; fd != "" && p.FailureDomain(fd) == nil {
		return notPermitted("%s publishes no failure domain %q (spec.failureDomain); use one of its status.failureDomains", ref, fd)
	}
	for i, d := range m.Spec.Disks {
		if err := admitTarget(p, p.StorageClass(d.StorageClass), "storage", d.StorageClass, d.Target, fmt.Sprintf("spec.disks[%d]", i)); err != nil {
			return err
		}
	}
	for i, nic := range m.Spec.Interfaces {
		if err := admitTarget(p, p.NetworkClass(nic.NetworkClass), "network", nic.NetworkClass, nic.Target, fmt.Sprintf("spec.interfaces[%d]", i)); err != nil {
			return err
		}
	}
	if r.admitter != nil {
		if err := r.admitter.Admit(p, m); err != nil {
			// A block that does not decode is the driver's InvalidOptions, as it would be
			// in Create; anything else is a refusal.
			var perm *PermanentError
			if errors.As(err, &perm) {
				return err
			}
			return notPermitted("%s", err.Error())
		}
	}
	return nil
}

// namespaceGVK is the kind of the metadata-only Namespace reads admission makes.
var namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")

// admitNamespace checks that the Provider's namespaceSelector admits namespace. The
// Namespace's labels are read from the manager's cache, metadata only.
func (r *Reconciler) admitNamespace(ctx context.Context, p *banlieuev1.Provider, namespace string) error {
	if p.Spec.NamespaceSelector == nil {
		return nil
	}
	sel, err := p.Namespaces()
	if err != nil {
		return notPermitted("Provider %s/%s has an invalid namespaceSelector (%s); an administrator must fix it", p.Namespace, p.Name, err.Error())
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(namespaceGVK)
	if err := r.client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get namespace %s: %w", namespace, err)
	}
	if !sel.Matches(labels.Set(ns.GetLabels())) {
		return notPermitted("Provider %s/%s does not admit namespace %s (its namespaceSelector); ask an administrator for a Provider that does", p.Namespace, p.Name, namespace)
	}
	return nil
}

// admitTarget checks one disk's or interface's class and target: the class must be one
// the Provider declares, and the target either the class's declared target or empty
// (the Provider's defaults). A target may also spell out defaults: every key the
// Provider's parameters set, with the parameter's value.
func admitTarget(p *banlieuev1.Provider, class *banlieuev1.ClassMapping, kind, name string, target map[string]string, field string) error {
	if class == nil {
		return notPermitted("Provider %s/%s offers no %s class %q (%s); use one it declares in spec.capabilities", p.Namespace, p.Name, kind, name, field)
	}
	if len(target) == 0 || maps.Equal(target, class.Target) || isDefaults(target, p.Spec.Parameters) {
		return nil
	}
	return notPermitted("%s.target is not the target Provider %s/%s declares for %s class %q; leave it out or copy the Provider's", field, p.Namespace, p.Name, kind, name)
}

// isDefaults reports whether every key of target is a Provider parameter with that value.
func isDefaults(target, parameters map[string]string) bool {
	for k, v := range target {
		if pv, ok := parameters[k]; !ok || pv != v {
			return false
		}
	}
	return true
}

// admitImage checks, before Create, that the machine's image is the one an
// administrator's VMImage gives for the driver's class, and, when the machine carries a
// resolved reference, that it is the one the Provider's own row of that VMImage holds:
// a machine cannot name another tenant's VM, or any backend object, as its clone source.
func (r *Reconciler) admitImage(ctx context.Context, p *banlieuev1.Provider, m *Machine) error {
	img := m.Spec.Image
	vmi := &banlieuev1.VMImage{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: img.Name}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return notPermitted("VMImage %q (spec.image.name) does not exist; a machine's image must be a VMImage", img.Name)
		}
		return fmt.Errorf("failed to get VMImage %s: %w", img.Name, err)
	}
	src := vmi.SourceFor(p.Spec.ProviderClassRef.Name)
	if src == nil {
		return notPermitted("VMImage %q has no source for provider class %q", img.Name, p.Spec.ProviderClassRef.Name)
	}
	if src.Kind != img.Kind || src.Ref != img.Ref || src.ImportFrom != img.ImportFrom || src.Checksum != img.Checksum {
		return notPermitted("spec.image is not VMImage %q's source for provider class %q; copy kind, ref, importFrom and checksum from it", img.Name, p.Spec.ProviderClassRef.Name)
	}
	if img.ResolvedRef == "" {
		return nil
	}
	if row := vmi.ProviderStatus(p.Namespace, p.Name); row == nil || row.ResolvedRef != img.ResolvedRef {
		return notPermitted("spec.image.resolvedRef is not what Provider %s/%s resolved VMImage %q to; leave it out or copy it from the VMImage's status.perProvider", p.Namespace, p.Name, img.Name)
	}
	return nil
}

// notPermitted says the machine asks for what its Provider does not offer it. It is
// Retryable, not Permanent: each refusal can be lifted without touching the machine (a
// namespace labelled, a Provider widened, a failure domain published, a VMImage
// created).
func notPermitted(format string, args ...any) error {
	return Retryable(infrav1.MachineNotPermittedReason, format, args...)
}
