package providersdk

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KindsServed is kindsServed, for the envtest suite's check against a real RESTMapper.
var KindsServed = kindsServed

// Register makes s read the shards' Leases with reader, afresh every time, and write
// its own with c, and writes it, as its leader does every period.
func (s *Shard) Register(ctx context.Context, reader client.Reader, c client.Client) error {
	s.registry.Bind(reader, c, 0)
	return s.registry.Renew(ctx)
}
