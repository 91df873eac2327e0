package proxmoxsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestErrorBodiesCarryPVEsMessage(t *testing.T) {
	s := start(t, Options{})
	token := http.Header{"Authorization": {"PVEAPIToken=" + s.TokenID + "=" + s.TokenSecret}}
	tests := []struct {
		name, method, path string
		header             http.Header
		wantStatus         string
		wantBody           string
	}{
		{name: "a handler's die is 500 with the message and its newline", method: "GET", path: "/nodes/pve1/qemu/4242/config", header: token,
			wantStatus: "500 Configuration file 'nodes/pve1/qemu-server/4242.conf' does not exist",
			wantBody:   `{"data":null,"message":"Configuration file 'nodes/pve1/qemu-server/4242.conf' does not exist\n"}`},
		{name: "a parameter error is 400 with the errors object", method: "GET", path: "/cluster/nextid?vmid=7", header: token,
			wantStatus: "400 Parameter verification failed.",
			wantBody:   `{"data":null,"errors":{"vmid":"invalid format - value does not look like a valid VM ID"},"message":"Parameter verification failed.\n"}`},
		{name: "an unknown method is 501 without a newline", method: "GET", path: "/nodes/pve1/frobnicate", header: token,
			wantStatus: "501 Method 'GET /nodes/pve1/frobnicate' not implemented",
			wantBody:   `{"data":null,"message":"Method 'GET /nodes/pve1/frobnicate' not implemented"}`},
		{name: "a failed login is the handler's 401, with a body", method: "POST", path: "/access/ticket?username=root@pam&password=nope",
			wantStatus: "401 authentication failure", wantBody: `{"data":null,"message":"authentication failure\n"}`},
		{name: "pveproxy's own 401 has no body", method: "GET", path: "/version", wantStatus: "401 No ticket"},
		{name: "a bad token is 401 Authentication failed!", method: "GET", path: "/version",
			header: http.Header{"Authorization": {"PVEAPIToken=" + s.TokenID + "=bad"}}, wantStatus: "401 Authentication failed!"},
		{name: "a path outside the API is pveproxy's 501 in plain text", method: "GET", path: "x", header: token,
			wantStatus: "501 no such uri", wantBody: "no such uri"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := raw(t, s, tt.method, tt.path, tt.header)
			if diff := cmp.Diff([]string{tt.wantStatus, tt.wantBody}, []string{status, body}); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if strings.HasPrefix(tt.wantBody, "{") && !json.Valid([]byte(body)) {
				t.Errorf("body %q is not JSON", body)
			}
		})
	}
}

func TestA401IsHeldBackAsPVEHoldsIt(t *testing.T) {
	tests := []struct {
		name          string
		delay         time.Duration
		atLeast, most time.Duration
	}{
		{name: "by the configured delay", delay: 300 * time.Millisecond, atLeast: 300 * time.Millisecond, most: 2 * time.Second},
		{name: "not at all when negative", delay: -1, most: 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{UnauthorizedDelay: tt.delay, Templates: map[string]string{}})
			begin := time.Now()
			if status, _ := raw(t, s, "GET", "/version", nil); status != "401 No ticket" {
				t.Fatalf("status %s", status)
			}
			if took := time.Since(begin); took < tt.atLeast || took > tt.most {
				t.Errorf("the 401 took %s, want between %s and %s", took, tt.atLeast, tt.most)
			}
		})
	}
	if d := (&Simulator{}).unauthorizedDelay(); d != 3*time.Second {
		t.Errorf("default delay %s, want PVE's 3s", d)
	}
}

func TestTheSimulatorServesOnlyOnLoopback(t *testing.T) {
	// The rule itself, faultproxy.LoopbackHost, has its table in sim/faultproxy.
	if _, err := Start(Options{Addr: "0.0.0.0:0"}); err == nil || !strings.Contains(err.Error(), "only on loopback") {
		t.Errorf("Start on 0.0.0.0 = %v, want it refused", err)
	}
}
