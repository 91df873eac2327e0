package pve

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// countingTransport records every API call in providersdk.BackendCalls under its
// method and path template, e.g. "GET /nodes/{node}/qemu/{vmid}/config".
type countingTransport struct {
	next http.RoundTripper
	// base is the API's path prefix, /api2/json.
	base string
	// class is the provider class the calls are counted under.
	class string
	// closed is set by Client.Close: a closed client sends nothing more, not even the
	// login go-proxmox makes again when a ticket expires.
	closed atomic.Bool
}

// RoundTrip sends the request and counts it; an HTTP error status counts as an error.
func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.closed.Load() {
		return nil, providersdk.ErrSessionClosed
	}
	res, err := t.next.RoundTrip(r)
	counted := err
	if err == nil && res.StatusCode >= 400 {
		counted = fmt.Errorf("%s", res.Status)
	}
	providersdk.CountBackendCall(t.class, r.Method+" "+pathTemplate(strings.TrimPrefix(r.URL.Path, t.base)), counted)
	return res, err
}

// CloseIdleConnections closes the idle connections of the transport underneath, so
// http.Client.CloseIdleConnections reaches them.
func (t *countingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// pathTemplate replaces the variable segments of an API path by their names, as PVE's
// API schema writes them, so the metric's cardinality stays bounded.
func pathTemplate(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	names := map[string]string{"nodes": "{node}", "qemu": "{vmid}", "tasks": "{upid}", "storage": "{storage}", "agent": "{command}", "pools": "{poolid}"}
	for i := 1; i < len(segs); i++ {
		prev := segs[i-1]
		switch {
		case prev == "content" && i >= 3:
			segs = append(segs[:i], "{volume}")
			i = len(segs)
		case names[prev] != "" && (prev != "storage" || i != 1):
			segs[i] = names[prev]
		}
	}
	return "/" + strings.Join(segs, "/")
}
