package pve

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

// newClient is a Client of the simulator with credentials, verifying its certificate;
// opts change its Connection first.
func newClient(t *testing.T, sim *proxmoxtest.Simulator, credentials map[string][]byte, opts ...func(*Connection)) *Client {
	t.Helper()
	conn := Connection{
		Endpoint:    sim.URL,
		Credentials: credentials,
		SecretRef:   "infra/pve-credentials",
		RootCAs: func() (*x509.CertPool, error) {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(sim.CACert)
			return pool, nil
		},
		ResponseTimeout: time.Minute,
		Class:           "proxmox",
	}
	for _, o := range opts {
		o(&conn)
	}
	c, err := New(conn)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestCallsFailWithTypedErrors(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	c := newClient(t, sim, sim.TokenCredentials())
	wrongToken := newClient(t, sim, map[string][]byte{TokenIDKey: []byte(sim.TokenID), TokenSecretKey: []byte("hunter2")})
	tests := []struct {
		name string
		call func() error
		is   func(error) bool
	}{{
		name: "the config of a VM that does not exist is not found",
		call: func() error { _, _, err := c.VMConfig(ctx, proxmoxtest.Node1, 4242); return err },
		is:   IsNotFound,
	}, {
		name: "a task PVE does not know is not found",
		call: func() error {
			_, err := c.TaskStatus(ctx, "UPID:pve1:00000001:00000001:00000001:qmclone:9000:root@pam:")
			return err
		},
		is: IsNotFound,
	}, {
		name: "a ref that is no UPID is not found",
		call: func() error { _, err := c.TaskStatus(ctx, "not-a-upid"); return err },
		is:   IsNotFound,
	}, {
		name: "a wrong token secret is Unauthorized",
		call: func() error { _, err := wrongToken.Cluster(ctx); return err },
		is:   providersdk.IsUnauthorized,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !tt.is(err) {
				t.Errorf("error %v is not of the kind wanted", err)
			}
		})
	}
}

// A clone, as the driver makes one: a VMID, the clone task, its status until it ends,
// and the new VM's config with the clone's name.
func TestCloneIsATaskThatMakesTheVM(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	c := newClient(t, sim, sim.TokenCredentials())
	vmid, err := c.NextVMID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	upid, err := c.Clone(ctx, proxmoxtest.Node1, proxmoxtest.TemplateVMID, CloneOptions{NewID: vmid, Name: "web", Description: "a clone"})
	if err != nil {
		t.Fatal(err)
	}
	if UPIDNode(upid) != proxmoxtest.Node1 {
		t.Errorf("UPID %q does not name node %s", upid, proxmoxtest.Node1)
	}
	waitTask(t, c, upid, "clone")
	conf, pending, err := c.VMConfig(ctx, proxmoxtest.Node1, vmid)
	if err != nil || conf["name"] != "web" || len(conf.DiskKeys()) != 1 || conf["digest"] == "" || !pending.Empty() {
		t.Fatalf("config of the clone = %v, pending %+v, %v; want the name web, the template's disk, a digest and nothing pending", conf, pending, err)
	}
	all, err := c.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var templates, vms int
	for _, r := range all {
		if r.Template {
			templates++
		} else if r.VMID == vmid {
			vms++
		}
	}
	if templates != 1 || vms != 1 {
		t.Errorf("Resources lists %d templates and %d VMs %d, want 1 of each: %+v", templates, vms, vmid, all)
	}
}

// waitTask waits up to 10 s for the task upid, doing what, to end, and fails the test
// when it does not or ends in error.
func waitTask(t *testing.T, c *Client, upid, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := c.TaskStatus(context.Background(), upid)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Running {
			if st.Failed() {
				t.Fatalf("%s failed: %s", what, st.ExitStatus)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running after 10s", what)
		}
	}
}

func TestAConfigChangePVECannotHotplugIsReadAsPending(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	c := newClient(t, sim, sim.TokenCredentials())
	const vmid = 150
	upid, err := c.Clone(ctx, proxmoxtest.Node1, proxmoxtest.TemplateVMID, CloneOptions{NewID: vmid, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, c, upid, "clone")
	if err := c.SetConfig(ctx, proxmoxtest.Node1, vmid, ConfigChange{Set: map[string]any{"hotplug": "network,disk,usb,cpu", "cores": 4, "vcpus": 2}}); err != nil {
		t.Fatal(err)
	}
	upid, err = c.Start(ctx, proxmoxtest.Node1, vmid)
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, c, upid, "start")

	// cores waits for the next power cycle; tags apply at once.
	if err := c.SetConfig(ctx, proxmoxtest.Node1, vmid, ConfigChange{Set: map[string]any{"cores": 8, "tags": "web"}}); err != nil {
		t.Fatal(err)
	}
	conf, pending, err := c.VMConfig(ctx, proxmoxtest.Node1, vmid)
	if err != nil {
		t.Fatal(err)
	}
	got := []any{conf["cores"], conf["tags"], pending.Set, pending.Apply(conf)["cores"]}
	want := []any{"4", "web", map[string]string{"cores": "8"}, "8"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cores, tags, pending, cores with pending (-want +got):\n%s", diff)
	}

	// More vcpus than cores × sockets: PVE keeps the value pending and says why.
	err = c.SetConfig(ctx, proxmoxtest.Node1, vmid, ConfigChange{Set: map[string]any{"vcpus": 6}})
	if want := map[string]string{"vcpus": "you can't add more vcpus than maxcpus"}; !cmp.Equal(HotplugProblems(err), want) {
		t.Errorf("SetConfig vcpus=6: %v, hotplug problems %v; want %v", err, HotplugProblems(err), want)
	}
	if HotplugProblems(errors.New("no")) != nil {
		t.Error("HotplugProblems of an error that is not PVE's is not nil")
	}
	// Reverting drops the pending values.
	if err := c.SetConfig(ctx, proxmoxtest.Node1, vmid, ConfigChange{Revert: []string{"cores", "vcpus"}}); err != nil {
		t.Fatal(err)
	}
	if _, pending, err = c.VMConfig(ctx, proxmoxtest.Node1, vmid); err != nil || !pending.Empty() {
		t.Errorf("pending after the revert: %+v, %v; want none", pending, err)
	}
}

// Concurrent calls, as a provider's workers make them, go back to the connections the
// previous ones left idle instead of opening new TLS connections each.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const workers = 10
	sim := proxmoxtest.Start(t)
	// Each round's responses are held until all of its calls have theirs, so that the
	// round has as many connections in use at once.
	var mu sync.Mutex
	arrived, release := 0, make(chan struct{})
	c := newClient(t, sim, sim.TokenCredentials(), func(conn *Connection) {
		conn.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := next.RoundTrip(r)
				mu.Lock()
				arrived++
				wait := release
				if arrived == workers {
					arrived = 0
					close(release)
					release = make(chan struct{})
				}
				mu.Unlock()
				<-wait
				return resp, err
			})
		}
	})
	var opened atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				opened.Add(1)
			}
		},
	})
	round := func() int32 {
		before := opened.Load()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				if _, err := c.NextVMID(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return opened.Load() - before
	}
	if n := round(); n != workers {
		t.Fatalf("%d connections for %d calls at once, want one each", n, workers)
	}
	if n := round(); n > workers/2 {
		t.Errorf("%d new connections for %d calls at once after as many, want the idle ones used again", n, workers)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
