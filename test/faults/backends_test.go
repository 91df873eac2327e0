package faults

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/banlieue/banlieue/internal/devenv"
	"github.com/banlieue/banlieue/sim/libvirtd"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
	vspheresim "github.com/banlieue/banlieue/sim/vsphere"
	"github.com/banlieue/banlieue/test/guestagent"
)

// backends are the simulated backends, shaped as 'banlieue dev' shapes them so that
// devenv's Providers fit them: the same templates, pool, image and network names.
type backends struct {
	VSphere *vspheresim.Simulator
	Proxmox *proxmoxsim.Simulator
	// Libvirt is nil when no libvirtd can run here.
	Libvirt *libvirtd.Daemon
}

// startBackends starts the simulators and, where it can run, a private libvirtd. It
// does not use devenv.StartBackends: that one's libvirt network has a fixed bridge
// name, so it cannot run beside another 'banlieue dev' or suite on the same host.
func startBackends(t *testing.T) *backends {
	t.Helper()
	// No simulated guest agent: its standing property filter and a burst of clones take
	// two of vcsim's locks in opposite orders and can deadlock the simulator (the scale
	// harness runs without it for the same reason). Ready never waits for an address.
	vs, err := vspheresim.Start(vspheresim.Options{Templates: []string{devenv.VSphereTemplate}, GuestAddressDelay: -1})
	if err != nil {
		t.Fatalf("failed to start the vCenter simulator: %v", err)
	}
	t.Cleanup(func() { stopWithin(t, "the vCenter simulator", vs.Stop) })
	pve, err := proxmoxsim.Start(proxmoxsim.Options{
		Templates:       map[string]string{devenv.ProxmoxTemplate: "pve1"},
		Bridges:         []string{"vmbr0"},
		GuestAgentDelay: time.Second,
		TaskDelay:       200 * time.Millisecond,
		// Faults that reject credentials would otherwise wait PVE's 3 s per answer.
		UnauthorizedDelay: -1,
		// The listing lags as pvestatd's does (shorter than its 10s, so faults land
		// both before and after a new VM is reported).
		StatusInterval: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("failed to start the Proxmox VE simulator: %v", err)
	}
	t.Cleanup(func() { stopWithin(t, "the Proxmox VE simulator", pve.Stop) })
	b := &backends{VSphere: vs, Proxmox: pve}

	if why := libvirtd.Unavailable(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libvirt is required in CI: %s", why)
		}
		fmt.Fprintf(os.Stderr, "fault suite: skipping the libvirt part: %s\n", why)
		return b
	}
	b.Libvirt = libvirtd.StartT(t, libvirtd.Options{})
	// The pool, image and network devenv.LibvirtObjects names; the image is the real
	// guest when make test built it, so a guest lives through the libvirt rounds.
	if err := devenv.PrepareLibvirt(b.Libvirt, os.Getenv(guestagent.ImageEnv)); err != nil {
		t.Fatal(err)
	}
	return b
}

// objects are the namespace, credentials Secrets and Providers of the backends:
// devenv's, so the suite runs against what 'banlieue dev' users see.
func (b *backends) objects() []client.Object {
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devenv.ProviderNamespace}}}
	objs = append(objs, devenv.VSphereObjects(b.VSphere)...)
	objs = append(objs, devenv.ProxmoxObjects(b.Proxmox)...)
	if b.Libvirt != nil {
		objs = append(objs, devenv.LibvirtObjects(b.Libvirt))
	}
	return objs
}

// stopTimeout bounds the stop of a simulator at the end of the run.
const stopTimeout = 30 * time.Second

// stopWithin runs stop and gives up after stopTimeout, saying so: a wedged simulator
// (vcsim can leave a lock held) must not hold the control plane's own cleanup until
// the test binary's timeout.
func stopWithin(t *testing.T, what string, stop func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop()
	}()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		t.Errorf("%s did not stop in %s; it is left to the end of the test binary", what, stopTimeout)
	}
}
