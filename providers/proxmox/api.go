package proxmox

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// countingTransport records every API call in providersdk.BackendCalls under its
// method and path template, e.g. "GET /nodes/{node}/qemu/{vmid}/config".
type countingTransport struct {
	next http.RoundTripper
	// base is the API's path prefix, /api2/json.
	base string
}

// RoundTrip sends the request and counts it; an HTTP error status counts as an error.
func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(r)
	counted := err
	if err == nil && res.StatusCode >= 400 {
		counted = fmt.Errorf("%s", res.Status)
	}
	providersdk.CountBackendCall(ProviderClass, r.Method+" "+pathTemplate(strings.TrimPrefix(r.URL.Path, t.base)), counted)
	return res, err
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

// get reads path with query parameters into v.
func (s *session) get(ctx context.Context, path string, query map[string]string, v any) error {
	path = withQuery(path, query)
	return s.fail("GET "+path, s.api.Get(ctx, path, v))
}

// post posts params to path; the answer, a UPID for asynchronous methods, goes to v.
func (s *session) post(ctx context.Context, path string, params map[string]any, v any) error {
	return s.fail("POST "+path, s.api.Post(ctx, path, params, v))
}

// put puts params to path.
func (s *session) put(ctx context.Context, path string, params map[string]any, v any) error {
	return s.fail("PUT "+path, s.api.Put(ctx, path, params, v))
}

// del deletes path with query parameters; the answer, a UPID, goes to v.
func (s *session) del(ctx context.Context, path string, query map[string]string, v any) error {
	path = withQuery(path, query)
	return s.fail("DELETE "+path, s.api.Delete(ctx, path, v))
}

// withQuery appends query parameters to path.
func withQuery(path string, query map[string]string) string {
	if len(query) == 0 {
		return path
	}
	q := url.Values{}
	for k, val := range query {
		q.Set(k, val)
	}
	return path + "?" + q.Encode()
}

// vmPath is the API path of a VM, with more path segments appended.
func vmPath(node string, vmid int, more ...string) string {
	p := fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid)
	for _, m := range more {
		p += "/" + m
	}
	return p
}
