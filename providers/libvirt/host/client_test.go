package host

import (
	"context"
	"errors"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/sim/libvirtd"
)

// A call given up on (its context ended first) hands back nothing of what its function
// returns later: the caller gets the zero value and the context's error at once, while
// the function, left to finish, keeps its result to itself. Under the race detector a
// result shared through a variable the function writes late is a data race.
func TestACallGivenUpOnHandsBackNothingOfItsLateResult(t *testing.T) {
	d := libvirtd.StartT(t, libvirtd.Options{})
	c, err := Connect(t.Context(), Config{Endpoint: d.TestURI()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	release, finished := make(chan struct{}), make(chan struct{})
	v, err := call(ctx, c, "LookupVolume", "look up a volume", func(*libvirt.Libvirt) (*Volume, error) {
		defer close(finished)
		<-release
		return &Volume{Name: "late"}, nil
	})
	close(release)
	<-finished
	if v != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("call = %+v, %v; want nothing and the context's cancellation", v, err)
	}
}

// A client closed while a call is under way (the Provider's session was replaced under
// a reconcile) says so, not that libvirtd is unreachable, and dials no more: a
// connection dialled then would use the credentials the Provider replaced and be left
// open.
func TestAClosedClientSaysSoAndDialsNoMore(t *testing.T) {
	d := libvirtd.StartT(t, libvirtd.Options{})
	c, err := Connect(t.Context(), Config{Endpoint: d.TestURI()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t.Context(), c, "ConnectGetHostname", "read the host's name", func(l *libvirt.Libvirt) (string, error) {
		c.Close()
		return l.ConnectGetHostname()
	})
	if !errors.Is(err, providersdk.ErrSessionClosed) || providersdk.IsUnreachable(err) {
		t.Errorf("a call cut short by Close: %v, want ErrSessionClosed and not Unreachable", err)
	}
	if _, err := c.client(); !errors.Is(err, providersdk.ErrSessionClosed) {
		t.Errorf("a call after Close: %v, want ErrSessionClosed", err)
	}
	if n := len(c.raw); n != 0 {
		t.Errorf("the closed client holds %d connections, want 0", n)
	}
}
