package proxmoxsim

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	proxmox "github.com/luthermonson/go-proxmox"
)

// start runs a simulator for one test; its 401 answers come at once unless o says
// how long to hold them back.
func start(t *testing.T, o Options) *Simulator {
	t.Helper()
	if o.UnauthorizedDelay == 0 {
		o.UnauthorizedDelay = -1
	}
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// client is a go-proxmox client that verifies the simulator's CA and authenticates
// with opts (the default API token when none).
func client(t *testing.T, s *Simulator, opts ...proxmox.Option) *proxmox.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CACert) {
		t.Fatal("CACert holds no certificate")
	}
	if len(opts) == 0 {
		opts = []proxmox.Option{proxmox.WithAPIToken(s.TokenID, s.TokenSecret)}
	}
	return proxmox.NewClient(s.URL, append([]proxmox.Option{proxmox.WithRootCAs(pool), proxmox.WithTimeout(30 * time.Second)}, opts...)...)
}

// wait returns a function that waits for the task a go-proxmox call started and
// returns how it ended.
func wait(t *testing.T) func(*proxmox.Task, error) error {
	t.Helper()
	return func(task *proxmox.Task, err error) error {
		t.Helper()
		if err != nil {
			t.Fatalf("starting the task: %v", err)
		}
		return task.Wait(context.Background(), 5*time.Millisecond, 10*time.Second)
	}
}

// must is wait for tasks that must succeed.
func must(t *testing.T) func(*proxmox.Task, error) {
	t.Helper()
	return func(task *proxmox.Task, err error) {
		t.Helper()
		if err := wait(t)(task, err); err != nil {
			t.Fatal(err)
		}
	}
}

// raw sends a request as it is and returns the status line and body.
func raw(t *testing.T, s *Simulator, method, path string, header http.Header) (string, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	body, _ := io.ReadAll(res.Body)
	return res.Status, string(body)
}

func apiStatus(err error) int {
	if ae, ok := proxmox.AsAPIError(err); ok {
		return ae.StatusCode
	}
	return 0
}

func TestClientsAuthenticateWithTokensAndTickets(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{}})
	ctx := context.Background()
	tests := []struct {
		name       string
		opts       []proxmox.Option
		wantStatus int
	}{
		{name: "the right API token is let in", opts: []proxmox.Option{proxmox.WithAPIToken(s.TokenID, s.TokenSecret)}},
		{name: "a wrong secret is refused with 401", opts: []proxmox.Option{proxmox.WithAPIToken(s.TokenID, "nope")}, wantStatus: 401},
		{name: "an unknown token is refused with 401", opts: []proxmox.Option{proxmox.WithAPIToken("root@pam!other", s.TokenSecret)}, wantStatus: 401},
		{name: "a password login gets a ticket", opts: []proxmox.Option{proxmox.WithCredentials(&proxmox.Credentials{Username: s.Username, Password: s.Password})}},
		{name: "a wrong password is refused with 401", opts: []proxmox.Option{proxmox.WithCredentials(&proxmox.Credentials{Username: s.Username, Password: "nope"})}, wantStatus: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client(t, s, tt.opts...).Version(ctx)
			if got := apiStatus(err); got != tt.wantStatus {
				t.Fatalf("status = %d (%v), want %d", got, err, tt.wantStatus)
			}
			if tt.wantStatus == 401 && !proxmox.IsNotAuthorized(err) {
				t.Errorf("the client does not see %v as not authorized", err)
			}
		})
	}
}

func TestAFailedAuthenticationAnswers401WithTheReasonAndNoBody(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{}})
	tests := []struct {
		name       string
		header     http.Header
		wantStatus string
	}{
		{name: "no credentials", wantStatus: "401 No ticket"},
		{name: "a wrong token", header: http.Header{"Authorization": {"PVEAPIToken=" + s.TokenID + "=wrong"}}, wantStatus: "401 Authentication failed!"},
		{name: "a forged ticket", header: http.Header{"Cookie": {"PVEAuthCookie=PVE:root@pam:66000000::Zm9v"}}, wantStatus: "401 Authentication failed!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := raw(t, s, "GET", "/version", tt.header)
			if diff := cmp.Diff([]string{tt.wantStatus, ""}, []string{status, body}); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestATicketWriteWithoutTheCSRFTokenIsRefused(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s, proxmox.WithCredentials(&proxmox.Credentials{Username: s.Username, Password: s.Password}))
	if err := c.CreateSession(ctx); err != nil {
		t.Fatal(err)
	}
	ticket := c.Session().Ticket
	// Reads need only the cookie; writes also the CSRF token that came with it.
	if status, _ := raw(t, s, "GET", "/cluster/nextid", http.Header{"Cookie": {"PVEAuthCookie=" + ticket}}); status != "200 OK" {
		t.Errorf("read with the ticket: %s, want 200 OK", status)
	}
	status, _ := raw(t, s, "POST", "/nodes/pve1/qemu/9000/status/start", http.Header{"Cookie": {"PVEAuthCookie=" + ticket}})
	if status != "401 Permission denied - invalid csrf token" {
		t.Errorf("write without the CSRF token: %s", status)
	}
	// With both, as go-proxmox sends them, the write goes through.
	vm, err := c.NodeRef("pve1").VirtualMachine(ctx, 9000)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := vm.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 150}); err != nil {
		t.Errorf("clone with a ticket session: %v", err)
	}
}

func TestErrorsReachTheClientAsPVEWritesThem(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	_, err := c.NodeRef("pve1").VirtualMachine(ctx, 4242)
	if !proxmox.IsNotFound(err) || !strings.Contains(err.Error(), "Configuration file 'nodes/pve1/qemu-server/4242.conf' does not exist") {
		t.Errorf("unknown VM: %v, want PVE's not-found text", err)
	}
	status, body := raw(t, s, "GET", "/nodes/pve1/frobnicate", http.Header{"Authorization": {"PVEAPIToken=" + s.TokenID + "=" + s.TokenSecret}})
	if diff := cmp.Diff([]string{"501 Method 'GET /nodes/pve1/frobnicate' not implemented", `{"data":null,"message":"Method 'GET /nodes/pve1/frobnicate' not implemented"}`}, []string{status, body}); diff != "" {
		t.Errorf("unknown path (-want +got):\n%s", diff)
	}
	status, body = raw(t, s, "GET", "/cluster/nextid", http.Header{"Authorization": {"PVEAPIToken=" + s.TokenID + "=" + s.TokenSecret}})
	if diff := cmp.Diff([]string{"200 OK", `{"data":"100"}`}, []string{status, body}); diff != "" {
		t.Errorf("nextid is a string in the envelope (-want +got):\n%s", diff)
	}
}

func TestAnOfflineNodeAnswers595AndShowsOfflineInTheCluster(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{"tpl": "pve2"}})
	ctx := context.Background()
	c := client(t, s)
	if err := s.SetNodeOnline("pve2", false); err != nil {
		t.Fatal(err)
	}
	_, err := c.NodeRef("pve2").VirtualMachines(ctx)
	if apiStatus(err) != StatusNodeUnreachable || !proxmox.IsNodeUnreachable(err) {
		t.Errorf("request for the offline node: %v, want 595", err)
	}
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	online := map[string]int{}
	for _, n := range cl.Nodes {
		online[n.Name] = n.Online
	}
	if diff := cmp.Diff(map[string]int{"pve1": 1, "pve2": 0}, online); diff != "" {
		t.Errorf("cluster status (-want +got):\n%s", diff)
	}
	rs, err := cl.Resources(ctx, "vm")
	if err != nil || len(rs) != 1 || rs[0].Status != "unknown" {
		t.Errorf("the offline node's template: %+v, %v; want status unknown", rs, err)
	}
	if err := s.SetNodeOnline("pve2", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeRef("pve2").VirtualMachines(ctx); err != nil {
		t.Errorf("back online: %v", err)
	}
}

func TestTheAPIGoesDownAndComesBackOnTheSameAddress(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{}})
	ctx := context.Background()
	c := client(t, s)
	s.Down()
	if _, err := c.Version(ctx); err == nil || errors.As(err, new(*proxmox.APIError)) {
		t.Fatalf("while down: %v, want a connection error", err)
	}
	if err := s.Up(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Version(ctx); err != nil {
		t.Errorf("after Up: %v", err)
	}
}

func TestRequestsAreCountedByPathTemplate(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	for range 3 {
		if _, err := c.NodeRef("pve1").VirtualMachine(ctx, 9000); err != nil {
			t.Fatal(err)
		}
	}
	got := s.Requests()
	want := map[string]int{"GET /nodes/{node}/qemu/{vmid}/status/current": 3, "GET /nodes/{node}/qemu/{vmid}/config": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
