package providersdk

import "context"

// Client is a session to one Provider's backend: the lifecycle of its VMs. It is shared
// by concurrent reconciles, so its methods must be safe for concurrent use. Every
// method is idempotent and returns promptly: a long backend operation is reported as a
// Task and polled through Observe.
//
// In one reconcile the Reconciler calls Observe first and hands what it returned to
// the Create, Update or Delete that follows, so a driver never has to find the VM again
// (Observation.State carries whatever it read) nor keep anything between the calls.
type Client interface {
	// Observe finds the machine's VM by the machine's UID and reports its state. It never
	// changes the backend.
	Observe(ctx context.Context, m *Machine) (Observation, error)

	// Create makes the machine's VM; obs is what Observe reported just before, with
	// Exists false. It succeeds when the VM already exists.
	Create(ctx context.Context, m *Machine, obs Observation) (CreateResult, error)

	// Update brings an existing VM in line with the machine's spec; obs is what Observe
	// reported just before, with Exists true and UpToDate false. It may take one step of
	// several: a step returned without a Task is synchronous, and the Reconciler
	// observes the VM again and, while it is still not up to date, calls Update again
	// in the same reconcile, a few times at most.
	Update(ctx context.Context, m *Machine, obs Observation) (UpdateResult, error)

	// Delete removes the machine's VM; obs is what Observe reported just before. The
	// SDK calls it for a deleted machine also when obs.Exists is false, once, so that a
	// driver removes what a Create interrupted before it made the VM left behind
	// (volumes, seed images, snippets): with nothing to remove, it returns at once. It
	// succeeds when the VM is already gone.
	Delete(ctx context.Context, m *Machine, obs Observation) (DeleteResult, error)

	// Disconnect closes the session. A reconcile may still hold it and call it after:
	// from then on every call fails with ErrSessionClosed and reaches no backend. A
	// session never logs in or dials again once closed: it was closed because its
	// Provider's spec or credentials changed, or the backend lost or refused it, and a
	// session reopened with what it was made with would act with credentials its
	// Provider has replaced, and be left open, as nothing would close it again.
	Disconnect(ctx context.Context) error
}

// ClientFns is a Client made of functions; a nil function does nothing and succeeds
// (Observe then reports that nothing exists).
type ClientFns struct {
	// ObserveFn implements Observe.
	ObserveFn func(ctx context.Context, m *Machine) (Observation, error)
	// CreateFn implements Create.
	CreateFn func(ctx context.Context, m *Machine, obs Observation) (CreateResult, error)
	// UpdateFn implements Update.
	UpdateFn func(ctx context.Context, m *Machine, obs Observation) (UpdateResult, error)
	// DeleteFn implements Delete.
	DeleteFn func(ctx context.Context, m *Machine, obs Observation) (DeleteResult, error)
	// DisconnectFn implements Disconnect.
	DisconnectFn func(ctx context.Context) error
}

var _ Client = ClientFns{}

// Observe calls ObserveFn.
func (c ClientFns) Observe(ctx context.Context, m *Machine) (Observation, error) {
	if c.ObserveFn == nil {
		return Observation{}, nil
	}
	return c.ObserveFn(ctx, m)
}

// Create calls CreateFn.
func (c ClientFns) Create(ctx context.Context, m *Machine, obs Observation) (CreateResult, error) {
	if c.CreateFn == nil {
		return CreateResult{}, nil
	}
	return c.CreateFn(ctx, m, obs)
}

// Update calls UpdateFn.
func (c ClientFns) Update(ctx context.Context, m *Machine, obs Observation) (UpdateResult, error) {
	if c.UpdateFn == nil {
		return UpdateResult{}, nil
	}
	return c.UpdateFn(ctx, m, obs)
}

// Delete calls DeleteFn.
func (c ClientFns) Delete(ctx context.Context, m *Machine, obs Observation) (DeleteResult, error) {
	if c.DeleteFn == nil {
		return DeleteResult{}, nil
	}
	return c.DeleteFn(ctx, m, obs)
}

// Disconnect calls DisconnectFn.
func (c ClientFns) Disconnect(ctx context.Context) error {
	if c.DisconnectFn == nil {
		return nil
	}
	return c.DisconnectFn(ctx)
}

// NopClient is a Client that does nothing: Observe reports that no VM exists and every
// other call succeeds.
type NopClient struct{}

var _ Client = NopClient{}

// Observe reports that no VM exists.
func (NopClient) Observe(context.Context, *Machine) (Observation, error) { return Observation{}, nil }

// Create does nothing.
func (NopClient) Create(context.Context, *Machine, Observation) (CreateResult, error) {
	return CreateResult{}, nil
}

// Update does nothing.
func (NopClient) Update(context.Context, *Machine, Observation) (UpdateResult, error) {
	return UpdateResult{}, nil
}

// Delete does nothing.
func (NopClient) Delete(context.Context, *Machine, Observation) (DeleteResult, error) {
	return DeleteResult{}, nil
}

// Disconnect does nothing.
func (NopClient) Disconnect(context.Context) error { return nil }
