package providersdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/test/provider"
)

// readyProvider creates a second Ready Provider of the test class in the env.
func (e *env) readyProvider(name string) *banlieuev1.Provider {
	e.t.Helper()
	p := &banlieuev1.Provider{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: banlieuev1.ProviderSpec{
			ProviderClassRef: banlieuev1.LocalObjectReference{Name: provider.ProviderClass},
			Connection:       banlieuev1.Connection{Endpoint: "test://" + name},
		},
	}
	e.create(p)
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: banlieuev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
	if err := k8s.Status().Update(e.ctx, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) image(sources ...banlieuev1.ImageSource) *banlieuev1.VMImage {
	e.t.Helper()
	img := &banlieuev1.VMImage{ObjectMeta: metav1.ObjectMeta{Name: e.ns}, Spec: banlieuev1.VMImageSpec{Sources: sources}}
	e.create(img)
	e.t.Cleanup(func() { _ = k8s.Delete(context.Background(), img) })
	return img
}

func (e *env) reconcileImage(r *providersdk.ImageReconciler, img *banlieuev1.VMImage) (ctrl.Result, *banlieuev1.VMImage) {
	e.t.Helper()
	res, err := r.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(img)})
	if err != nil {
		e.t.Fatalf("reconcile VMImage: %v", err)
	}
	got := &banlieuev1.VMImage{}
	if err := k8s.Get(e.ctx, client.ObjectKeyFromObject(img), got); err != nil {
		e.t.Fatal(err)
	}
	return res, got
}

// resolver is a Driver whose sessions answer ResolveImage per Provider endpoint.
func resolver(answers map[string]func() (providersdk.ImageResult, error)) providersdk.Driver {
	return providersdk.DriverFunc(func(_ context.Context, info providersdk.ProviderInfo) (providersdk.Client, error) {
		answer := answers[info.Provider.Spec.Connection.Endpoint]
		return struct {
			providersdk.NopClient
			providersdk.ImageResolverFunc
		}{ImageResolverFunc: func(context.Context, *providersdk.Image) (providersdk.ImageResult, error) { return answer() }}, nil
	})
}

func TestEachProviderWritesItsOwnImageRow(t *testing.T) {
	e := newEnv(t)
	a, b := e.readyProvider("a"), e.readyProvider("b")
	answers := map[string]func() (providersdk.ImageResult, error){
		"test://a": func() (providersdk.ImageResult, error) {
			return providersdk.ImageResult{Ready: true, ResolvedRef: "vm-42"}, nil
		},
		"test://b": func() (providersdk.ImageResult, error) {
			return providersdk.ImageResult{Reason: "TemplateNotFound", Message: `template "ubuntu-tpl" not found`}, nil
		},
	}
	r := providersdk.NewImageReconciler(k8s, provider.ProviderClass, providersdk.NewSessions(resolver(answers), k8s), 10*time.Minute)
	img := e.image(banlieuev1.ImageSource{ProviderClass: provider.ProviderClass, Kind: banlieuev1.ImageSourceTemplate, Ref: "ubuntu-tpl"})

	res, got := e.reconcileImage(r, img)
	want := []banlieuev1.ImageProviderStatus{
		{ProviderNamespace: e.ns, ProviderName: a.Name, Ready: ptr.To(true), ResolvedRef: "vm-42"},
		{ProviderNamespace: e.ns, ProviderName: b.Name, Ready: ptr.To(false), Reason: "TemplateNotFound", Message: `template "ubuntu-tpl" not found`},
	}
	sortRows := cmpopts.SortSlices(func(x, y banlieuev1.ImageProviderStatus) bool { return x.ProviderName < y.ProviderName })
	if diff := cmp.Diff(want, got.Status.PerProvider, sortRows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter >= 10*time.Minute {
		t.Errorf("requeue after %v, want a short backoff for the image that is not ready", res.RequeueAfter)
	}
	managers := map[string]bool{}
	for _, f := range got.ManagedFields {
		managers[f.Manager] = true
	}
	for _, p := range []*banlieuev1.Provider{a, b} {
		if m := providersdk.FieldManager(provider.ProviderClass, p.Namespace, p.Name); !managers[m] {
			t.Errorf("no field manager %s among %v", m, managers)
		}
	}

	// The backend goes away: the rows keep their last known state.
	answers["test://a"] = func() (providersdk.ImageResult, error) {
		return providersdk.ImageResult{}, providersdk.Unreachable(errors.New("connection refused"))
	}
	if _, again := e.reconcileImage(r, img); !cmp.Equal(got.Status.PerProvider, again.Status.PerProvider) {
		t.Errorf("an unreachable backend changed the rows: %+v", again.Status.PerProvider)
	}

	// The image drops the class's source: every row of the class goes.
	got.Spec.Sources = []banlieuev1.ImageSource{{ProviderClass: "other", Kind: banlieuev1.ImageSourceTemplate, Ref: "x"}}
	if err := k8s.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, gone := e.reconcileImage(r, img); len(gone.Status.PerProvider) != 0 {
		t.Errorf("rows left after the source was removed: %+v", gone.Status.PerProvider)
	}
}
