package providersdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
)

// ImageReconciler resolves, and where needed imports, the VMImages that have a source
// for its provider class on each of the class's Providers, and writes each Provider's
// row of status.perProvider with server-side apply under a field manager of that
// Provider's own, so rows of different Providers never overwrite each other.
type ImageReconciler struct {
	client   client.Client
	class    string
	sessions *Sessions
	resync   time.Duration
	progress time.Duration
	backoff  workqueue.TypedRateLimiter[types.UID]
	// shard is the part of the class's Providers served; all when nil.
	shard *Shard
}

// NewImageReconciler returns an ImageReconciler for class, connecting through sessions.
// A ready image is looked at again every resync (so a deleted template is noticed); an
// import in progress every few seconds; an image that is not ready with backoff.
func NewImageReconciler(c client.Client, class string, sessions *Sessions, resync time.Duration) *ImageReconciler {
	return &ImageReconciler{
		client: c, class: class, sessions: sessions, resync: resync, progress: 5 * time.Second,
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Second, resync),
	}
}

// SetupWithManager registers the ImageReconciler with mgr. It watches VMImages and the
// Providers of its class: a Provider that turns Ready has every image looked at.
func (r *ImageReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexOnce(mgr, "VMImage/"+ImageClassField, IndexImages); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&banlieuev1.VMImage{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&banlieuev1.Provider{}, handler.EnqueueRequestsFromMapFunc(r.imagesOfClass), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			p, ok := o.(*banlieuev1.Provider)
			return ok && r.claims(p)
		}))).
		Named(r.class + "-image").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// claims reports whether p is of the reconciler's class and in its shard. A Provider two
// shards conflict on is not Ready, so its images wait.
func (r *ImageReconciler) claims(p *banlieuev1.Provider) bool {
	if r.shard != nil {
		return r.shard.matches(p)
	}
	return p.Spec.ProviderClassRef.Name == r.class
}

// imagesOfClass lists the VMImages with a source for the reconciler's class, from the
// cache through the index IndexImages adds.
func (r *ImageReconciler) imagesOfClass(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &banlieuev1.VMImageList{}
	if err := r.client.List(ctx, list, client.MatchingFields{ImageClassField: r.class}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list VMImages")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	return reqs
}

// FieldManager is the server-side-apply field manager a provider of class uses for
// the Provider namespace/name's row of a VMImage's status.perProvider.
func FieldManager(class, namespace, name string) string {
	return "banlieue-" + class + "/" + namespace + "/" + name
}

// Reconcile resolves one VMImage on every Provider of the class.
func (r *ImageReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	img := &banlieuev1.VMImage{}
	if err := r.client.Get(ctx, req.NamespacedName, img); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	providers := &banlieuev1.ProviderList{}
	if err := r.client.List(ctx, providers); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list Providers: %w", err)
	}
	src := img.SourceFor(r.class)
	after := time.Duration(0)
	var errs []error
	for i := range providers.Items {
		p := &providers.Items[i]
		if !r.claims(p) {
			continue
		}
		if src == nil || !p.DeletionTimestamp.IsZero() {
			// No source (any more) for this class: the row goes away with its manager's fields.
			errs = append(errs, r.apply(ctx, img, p, nil))
			continue
		}
		if ptr.Deref(p.Spec.Paused, false) || !providerReady(p) {
			continue // the Provider's turning Ready enqueues the image again
		}
		row, next := r.resolve(ctx, img, src, p)
		if row != nil {
			errs = append(errs, r.apply(ctx, img, p, row))
		}
		if after == 0 || next < after {
			after = next
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if after > 0 {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{}, nil
}

// resolve asks the Provider's backend about the image. It returns the row to write
// (nil to keep the current one, as while the backend is unreachable) and when to look
// again.
func (r *ImageReconciler) resolve(ctx context.Context, img *banlieuev1.VMImage, src *banlieuev1.ImageSource, p *banlieuev1.Provider) (*banlieuev1.ImageProviderStatus, time.Duration) {
	key := types.UID(string(img.UID) + "/" + string(p.UID))
	log := ctrl.LoggerFrom(ctx).WithValues("Provider", klog.KObj(p))
	var res ImageResult
	err := withBackend(ctx, DefaultCallTimeout, func(ctx context.Context) error {
		cl, err := r.sessions.Session(ctx, p)
		if err == nil {
			res, err = resolveImage(ctx, cl, &Image{Name: img.Name, UID: img.UID, Source: *src})
		}
		return err
	})
	if err != nil {
		if IsUnreachable(err) || IsUnauthorized(err) {
			r.sessions.Forget(ctx, p.UID)
		}
		// The Provider's own conditions report the backend's health; the row keeps its
		// last known state so that placement does not flap.
		log.V(2).Info("Could not resolve image; retrying", "err", redact.Text(err.Error()))
		return nil, r.backoff.When(key)
	}
	row := &banlieuev1.ImageProviderStatus{
		ProviderNamespace: p.Namespace, ProviderName: p.Name,
		Ready: ptr.To(res.Ready), ResolvedRef: res.ResolvedRef, Reason: res.Reason, Message: redact.Text(res.Message),
	}
	switch {
	case res.InProgress:
		return row, r.progress
	case res.Ready:
		r.backoff.Forget(key)
		return row, r.resync
	default:
		return row, r.backoff.When(key)
	}
}

// providerReady reports whether the Provider's Ready condition is True.
func providerReady(p *banlieuev1.Provider) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == banlieuev1.ReadyCondition {
			return c.Status == "True"
		}
	}
	return false
}

// apply writes the Provider's row (or, with row nil, removes it) unless the image
// already shows exactly that.
func (r *ImageReconciler) apply(ctx context.Context, img *banlieuev1.VMImage, p *banlieuev1.Provider, row *banlieuev1.ImageProviderStatus) error {
	current := img.ProviderStatus(p.Namespace, p.Name)
	if (row == nil && current == nil) || (row != nil && current != nil && equality.Semantic.DeepEqual(*row, *current)) {
		return nil
	}
	rows := []any{}
	if row != nil {
		// The same fields a typed client would send: the empty strings are left out,
		// as the CRD does not take them.
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(row)
		if err != nil {
			return fmt.Errorf("failed to convert image row for Provider %s/%s: %w", p.Namespace, p.Name, err)
		}
		rows = append(rows, m)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": banlieuev1.GroupVersion.String(), "kind": "VMImage",
		"metadata": map[string]any{"name": img.Name},
		"status":   map[string]any{"perProvider": rows},
	}}
	if err := r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager(r.class, p.Namespace, p.Name)), client.ForceOwnership); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("failed to apply image row for Provider %s/%s: %w", p.Namespace, p.Name, err))
	}
	return nil
}
