package providersdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// errCredentialsNotFound says the Provider's Secret does not exist.
var errCredentialsNotFound = errors.New("credentials Secret not found")

// errCABundleNotFound says the Provider's CA bundle ConfigMap, Secret or key does not exist.
var errCABundleNotFound = errors.New("CA bundle not found")

// Sessions hands out one backend session per Provider, shared by every controller of a
// provider process: the machine, Provider and VMImage reconcilers. A session is replaced
// when the Provider's spec changes, its credentials Secret is rotated or its CA bundle's
// content changes; it is never opened per reconcile.
type Sessions struct {
	driver Driver
	reader client.Reader
	cache  *sessionCache

	// clusterMu guards clusterID, read once (ClusterID).
	clusterMu sync.Mutex
	clusterID *string
}

// NewSessions returns Sessions that connect with driver and read Secrets and ConfigMaps
// with reader. Use the manager's API reader, so no Secret is cached cluster-wide.
func NewSessions(driver Driver, reader client.Reader) *Sessions {
	return &Sessions{driver: driver, reader: reader, cache: newSessionCache()}
}

// ClusterNamespace is the namespace whose UID identifies the cluster in the marks a
// driver writes on its VMs (Machine.ClusterID): kube-system, which every cluster has and
// nobody recreates, as Cluster API and many tools use it for the same purpose.
const ClusterNamespace = "kube-system"

// ClusterID returns the cluster's identity, the UID of ClusterNamespace, read once;
// "" when the cluster has no such namespace. An error (the API server unreachable, say)
// is returned and the read is tried again on the next call.
func (s *Sessions) ClusterID(ctx context.Context) (string, error) {
	s.clusterMu.Lock()
	defer s.clusterMu.Unlock()
	if s.clusterID != nil {
		return *s.clusterID, nil
	}
	ns := &corev1.Namespace{}
	id := ""
	switch err := s.reader.Get(ctx, client.ObjectKey{Name: ClusterNamespace}, ns); {
	case err == nil:
		id = string(ns.UID)
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("failed to read the cluster's identity (namespace %s): %w", ClusterNamespace, err)
	}
	s.clusterID = &id
	return id, nil
}

// Connect returns the Provider's session, connecting when there is none for the
// Provider's current spec, credentials and CA bundle.
func (s *Sessions) Connect(ctx context.Context, p *banlieuev1.Provider) (Client, error) {
	info := ProviderInfo{Provider: p}
	key := sessionKey{provider: p.UID, generation: p.Generation}
	if ref := p.Spec.Connection.CredentialsRef; ref.IsDefined() {
		secret := &corev1.Secret{}
		if err := s.reader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, secret); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("secret %s/%s named by spec.connection.credentialsRef does not exist; create it in the Provider's namespace with the keys the provider's guide lists: %w",
					p.Namespace, ref.Name, errCredentialsNotFound)
			}
			return nil, fmt.Errorf("failed to get credentials Secret: %w", err)
		}
		info.Credentials, key.secretVersion = secret.Data, secret.ResourceVersion
	}
	ca, err := s.caBundle(ctx, p)
	if err != nil {
		return nil, err
	}
	if ca != nil {
		sum := sha256.Sum256(ca)
		info.CABundle, key.caDigest = ca, hex.EncodeToString(sum[:])
	}
	return s.cache.get(ctx, key, func(ctx context.Context) (Client, error) {
		ctrl.LoggerFrom(ctx).V(2).Info("Connecting to backend", "Provider", klog.KObj(p))
		return s.driver.Connect(ctx, info)
	})
}

// Session returns the Provider's open session without reading its Secret and CA bundle
// again, as long as the Provider's spec is the one it was opened for; otherwise it
// connects as Connect does. The machine and VMImage reconcilers use it: they run on every
// machine event, and an uncached Secret GET per reconcile would cost the API server one
// read per event. A rotated Secret is still picked up: by the Provider controller's
// Connect on its next inventory check, or at once when the backend rejects the old
// credentials, since an Unauthorized answer forgets the session.
func (s *Sessions) Session(ctx context.Context, p *banlieuev1.Provider) (Client, error) {
	if cl := s.cache.current(p.UID, p.Generation); cl != nil {
		return cl, nil
	}
	return s.Connect(ctx, p)
}

// Forget drops the Provider's session, so the next Connect opens a new one.
func (s *Sessions) Forget(ctx context.Context, provider types.UID) { s.cache.forget(ctx, provider) }

// caBundle reads spec.connection.caBundle from wherever it is given; nil when unset.
func (s *Sessions) caBundle(ctx context.Context, p *banlieuev1.Provider) ([]byte, error) {
	b := p.Spec.Connection.CABundle
	switch {
	case b == nil:
		return nil, nil
	case b.Inline != "":
		return []byte(b.Inline), nil
	case b.ConfigMapRef.IsDefined():
		cm := &corev1.ConfigMap{}
		return s.readKey(ctx, p.Namespace, "ConfigMap", cm, b.ConfigMapRef, func(key string) ([]byte, bool) {
			v, ok := cm.Data[key]
			return []byte(v), ok
		})
	case b.SecretRef.IsDefined():
		secret := &corev1.Secret{}
		return s.readKey(ctx, p.Namespace, "Secret", secret, b.SecretRef, func(key string) ([]byte, bool) {
			v, ok := secret.Data[key]
			return v, ok
		})
	}
	return nil, nil
}

// readKey reads ref's object (a ConfigMap or Secret, into obj) in namespace and returns
// its key's value, found with value.
func (s *Sessions) readKey(ctx context.Context, namespace, kind string, obj client.Object, ref banlieuev1.KeyReference, value func(key string) ([]byte, bool)) ([]byte, error) {
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, ref.Name, errCABundleNotFound)
		}
		return nil, fmt.Errorf("failed to get CA bundle %s: %w", kind, err)
	}
	if v, ok := value(ref.Key); ok {
		return v, nil
	}
	return nil, fmt.Errorf("%s %s/%s has no key %q: %w", kind, namespace, ref.Name, ref.Key, errCABundleNotFound)
}
