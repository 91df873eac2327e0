package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/banlieue/banlieue/test/testenv"
)

const (
	// systemNamespace is where config/default and the provider overlays run banlieue.
	systemNamespace = "banlieue-system"
	// providersNamespace is the Providers' namespace the provider overlays default to.
	providersNamespace = "infra"
	// userNamespace is a user's namespace, with VMs whose user-data Secrets the providers
	// read: install grants that with config/providers/user-data.
	userNamespace = "tenant"
	// fieldOwner is the field manager of the suite's server-side applies.
	fieldOwner = client.FieldOwner("banlieue-install-test")
)

// overlays are the kustomizations an operator applies, relative to the repository root.
var overlays = []string{"config/default", "config/providers/vsphere", "config/providers/libvirt", "config/providers/proxmox"}

// render builds the kustomization in dir (an absolute path) with the kustomize API, as
// 'kubectl apply -k' does.
func render(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("failed to render %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		// Through JSON, so that numbers are int64 as the API machinery expects.
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("failed to read %s from %s: %w", r.CurId(), dir, err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("failed to read %s from %s: %w", r.CurId(), dir, err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// renderAll renders every overlay, in order, then config/providers/user-data for
// userNamespace.
func renderAll() ([]*unstructured.Unstructured, error) {
	var all []*unstructured.Unstructured
	for _, o := range overlays {
		objs, err := render(testenv.RepoPath(o))
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	objs, err := renderUserData(userNamespace)
	if err != nil {
		return nil, err
	}
	return append(all, objs...), nil
}

// renderUserData renders config/providers/user-data for namespace, through the overlay
// its kustomization.yaml tells an operator to write.
func renderUserData(namespace string) ([]*unstructured.Unstructured, error) {
	dir, err := os.MkdirTemp("", "banlieue-user-data-")
	if err != nil {
		return nil, fmt.Errorf("failed to create the overlay's folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// kustomize takes a relative path to a base only.
	base, err := filepath.Rel(dir, testenv.RepoPath("config/providers/user-data"))
	if err != nil {
		return nil, fmt.Errorf("failed to locate config/providers/user-data: %w", err)
	}
	kustomization := "resources: [" + base + "]\nnamespace: " + namespace + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return nil, fmt.Errorf("failed to write the overlay: %w", err)
	}
	return render(dir)
}

// apply server-side applies o as the suite's field owner.
func apply(ctx context.Context, o *unstructured.Unstructured, opts ...client.ApplyOption) error {
	opts = append([]client.ApplyOption{fieldOwner, client.ForceOwnership}, opts...)
	if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
		return fmt.Errorf("failed to apply %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
	}
	return nil
}

// install does what the docs tell an operator to do, against the suite's API server:
// create the Providers' namespace, then apply config/default and every provider overlay,
// and let the providers read user-data Secrets in userNamespace (created too, as a
// user's namespace is before its grant). The Namespaces go first, for real, because a dry-run of an object in a namespace that
// does not exist yet fails; then every object is applied with dry-run, so that the API
// server validates each as it comes out of kustomize; then all of them for real.
func install(ctx context.Context) error {
	objs, err := renderAll()
	if err != nil {
		return err
	}
	for _, ns := range []string{providersNamespace, userNamespace} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("failed to create the namespace %s: %w", ns, err)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := apply(ctx, o); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, o := range objs {
		errs = append(errs, apply(ctx, o, client.DryRunAll))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dry-run: %w", err)
	}
	for _, o := range objs {
		if err := apply(ctx, o); err != nil {
			return err
		}
	}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			if err := established(ctx, o.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// established waits until the CRD name is served.
func established(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		return slices.ContainsFunc(conditions, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Established" && m["status"] == "True"
		}), nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s is not established: %w", name, err)
	}
	return nil
}

// forbidden reports whether err is the API server's refusal.
func forbidden(err error) bool { return apierrors.IsForbidden(err) }
