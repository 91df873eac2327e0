package providersdk

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/banlieue/banlieue/pkg/redact"
)

// sessionKey identifies what a cached session was connected with. A session whose
// Provider was edited, whose Secret was rotated or whose CA bundle changed is replaced.
type sessionKey struct {
	provider      types.UID
	generation    int64
	secretVersion string
	caDigest      string
}

// sessionCache holds one Client per Provider.
type sessionCache struct {
	mu      sync.Mutex
	entries map[types.UID]*session
}

type session struct {
	mu     sync.Mutex
	key    sessionKey
	client Client
}

func newSessionCache() *sessionCache {
	return &sessionCache{entries: map[types.UID]*session{}}
}

// get returns the session for key, connecting (and disconnecting a stale session of
// the same Provider) when there is none for exactly that key.
func (c *sessionCache) get(ctx context.Context, key sessionKey, connect func(context.Context) (Client, error)) (Client, error) {
	c.mu.Lock()
	s := c.entries[key.provider]
	if s == nil {
		s = &session{}
		c.entries[key.provider] = s
	}
	c.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil && s.key == key {
		return s.client, nil
	}
	s.disconnect(ctx)
	cl, err := connect(ctx)
	if err != nil {
		return nil, err
	}
	s.key, s.client = key, cl
	return cl, nil
}

// current returns the Provider's session when it was connected for the Provider's
// generation, whatever Secret and CA bundle versions it was connected with; nil when
// there is none.
func (c *sessionCache) current(provider types.UID, generation int64) Client {
	c.mu.Lock()
	s := c.entries[provider]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil || s.key.generation != generation {
		return nil
	}
	return s.client
}

// forget disconnects and drops the Provider's session, so the next get connects again.
func (c *sessionCache) forget(ctx context.Context, provider types.UID) {
	c.mu.Lock()
	s := c.entries[provider]
	delete(c.entries, provider)
	c.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.disconnect(ctx)
		s.mu.Unlock()
	}
}

// disconnect closes the session's client; s.mu must be held.
func (s *session) disconnect(ctx context.Context) {
	if s.client == nil {
		return
	}
	if err := s.client.Disconnect(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Info("Failed to disconnect from backend", "err", redact.Text(err.Error()))
	}
	s.client = nil
}
