package host

import (
	"context"
	"errors"
	"testing"

	"github.com/digitalocean/go-libvirt"

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
