package proxmoxsim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// handler answers one API method. It runs with the simulator's lock held and returns
// the value of the data key, or an error (an *apiError to choose the status).
type handler func(*call) (any, error)

// route is one API method: an HTTP method and a path template whose {name} segments
// become parameters, as in PVE's API schema. A {volume} segment at the end takes the
// rest of the path, because go-proxmox does not escape the slash in local:iso/x.iso.
type route struct {
	method, pattern string
	segs            []string
	handle          handler
	// local routes run on the node serving the API even when the path names another
	// node (PVE's upload, which has no proxyto).
	local bool
}

// call is one request on its way through a handler.
type call struct {
	r        *http.Request
	template string
	params   map[string]string
	// node is the node the path names, if any.
	node string
	// user is who authenticated: user@realm, or user@realm!token for an API token.
	user   string
	upload *upload
}

// routeTable lists the API methods the simulator implements; everything else
// answers 501, as PVE does for a method it does not have.
func (s *Simulator) routeTable() []route {
	const vm = "/nodes/{node}/qemu/{vmid}"
	const st = "/nodes/{node}/storage/{storage}"
	rs := []route{
		{method: "GET", pattern: "/version", handle: s.getVersion},
		{method: "GET", pattern: "/access/domains", handle: s.getDomains},
		{method: "GET", pattern: "/access/ticket", handle: func(*call) (any, error) { return nil, nil }},
		{method: "POST", pattern: "/access/ticket", handle: s.postTicket},
		{method: "GET", pattern: "/access/permissions", handle: s.getPermissions},
		{method: "GET", pattern: "/cluster/status", handle: s.getClusterStatus},
		{method: "GET", pattern: "/cluster/resources", handle: s.getClusterResources},
		{method: "GET", pattern: "/cluster/nextid", handle: s.getNextID},
		{method: "GET", pattern: "/cluster/tasks", handle: s.getClusterTasks},
		{method: "GET", pattern: "/cluster/ha/resources", handle: s.getHAResources},
		{method: "POST", pattern: "/cluster/ha/resources", handle: s.postHAResource},
		{method: "GET", pattern: "/cluster/ha/resources/{sid}", handle: s.getHAResource},
		{method: "GET", pattern: "/pools", handle: s.getPools},
		{method: "POST", pattern: "/pools", handle: s.postPool},
		{method: "GET", pattern: "/pools/{poolid}", handle: s.getPool},
		{method: "GET", pattern: "/storage", handle: s.getStorageConfigs},
		{method: "GET", pattern: "/storage/{storage}", handle: s.getStorageConfig},
		{method: "GET", pattern: "/nodes", handle: s.getNodes},
		{method: "GET", pattern: "/nodes/{node}/status", handle: s.getNodeStatus},
		{method: "GET", pattern: "/nodes/{node}/version", handle: s.getNodeVersion},
		{method: "GET", pattern: "/nodes/{node}/network", handle: s.getNetwork},
		{method: "GET", pattern: "/nodes/{node}/network/{iface}", handle: s.getNetworkIface},
		{method: "GET", pattern: "/nodes/{node}/tasks", handle: s.getNodeTasks},
		{method: "GET", pattern: "/nodes/{node}/tasks/{upid}/status", handle: s.getTaskStatus},
		{method: "GET", pattern: "/nodes/{node}/tasks/{upid}/log", handle: s.getTaskLog},
		{method: "DELETE", pattern: "/nodes/{node}/tasks/{upid}", handle: s.deleteTask},
		{method: "GET", pattern: "/nodes/{node}/storage", handle: s.getNodeStorages},
		{method: "GET", pattern: st + "/status", handle: s.getStorageStatus},
		{method: "GET", pattern: st + "/content", handle: s.getStorageContent},
		{method: "GET", pattern: st + "/content/{volume}", handle: s.getVolumeAttributes},
		{method: "DELETE", pattern: st + "/content/{volume}", handle: s.deleteVolume},
		{method: "POST", pattern: st + "/upload", handle: s.postUpload, local: true},
		{method: "POST", pattern: st + "/download-url", handle: s.postDownloadURL},
		{method: "GET", pattern: "/nodes/{node}/qemu", handle: s.getVMs},
		{method: "POST", pattern: "/nodes/{node}/qemu", handle: s.postVM},
		{method: "DELETE", pattern: vm, handle: s.deleteVM},
		{method: "GET", pattern: vm + "/config", handle: s.getVMConfig},
		{method: "POST", pattern: vm + "/config", handle: s.postVMConfig},
		{method: "PUT", pattern: vm + "/config", handle: s.putVMConfig},
		{method: "GET", pattern: vm + "/pending", handle: s.getVMPending},
		{method: "GET", pattern: vm + "/cloudinit", handle: s.getCloudinit},
		{method: "GET", pattern: vm + "/cloudinit/dump", handle: s.getCloudinitDump},
		{method: "PUT", pattern: vm + "/resize", handle: s.putResize},
		{method: "POST", pattern: vm + "/template", handle: s.postTemplate},
		{method: "POST", pattern: vm + "/clone", handle: s.postClone},
		{method: "GET", pattern: vm + "/status/current", handle: s.getVMStatus},
		{method: "GET", pattern: vm + "/agent/{command}", handle: s.agentCommand},
		{method: "POST", pattern: vm + "/agent/{command}", handle: s.agentCommand},
		{method: "POST", pattern: vm + "/status/start", handle: s.powerAction("start")},
		{method: "POST", pattern: vm + "/status/stop", handle: s.powerAction("stop")},
		{method: "POST", pattern: vm + "/status/shutdown", handle: s.powerAction("shutdown")},
		{method: "POST", pattern: vm + "/status/reboot", handle: s.powerAction("reboot")},
		{method: "POST", pattern: vm + "/status/reset", handle: s.powerAction("reset")},
		{method: "POST", pattern: vm + "/status/suspend", handle: s.powerAction("suspend")},
		{method: "POST", pattern: vm + "/status/resume", handle: s.powerAction("resume")},
	}
	for i := range rs {
		rs[i].segs = strings.Split(strings.Trim(rs[i].pattern, "/"), "/")
	}
	return rs
}

// match finds the route for a method and a path relative to /api2/json.
func (s *Simulator) match(method, path string) (*route, map[string]string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := range s.routes {
		rt := &s.routes[i]
		if rt.method != method {
			continue
		}
		if vals, ok := matchSegments(rt.segs, segs); ok {
			return rt, vals
		}
	}
	return nil, nil
}

func matchSegments(pattern, segs []string) (map[string]string, bool) {
	vals := map[string]string{}
	for i, p := range pattern {
		if i >= len(segs) {
			return nil, false
		}
		if !strings.HasPrefix(p, "{") {
			if p != segs[i] {
				return nil, false
			}
			continue
		}
		name := strings.Trim(p, "{}")
		if name == "volume" && i == len(pattern)-1 {
			vals[name] = strings.Join(segs[i:], "/")
			return vals, true
		}
		if segs[i] == "" {
			return nil, false
		}
		vals[name] = segs[i]
	}
	return vals, len(pattern) == len(segs)
}

// ServeHTTP answers one API request the way pveproxy does: authenticate, read the
// parameters, find the method, forward to the node the path names (here: check it is
// reachable), run the handler.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	path, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok || (path != "" && path[0] != '/') {
		writeError(w, proxyError(http.StatusNotImplemented, "no such uri"))
		return
	}
	path = "/" + strings.Trim(path, "/")
	rt, pathParams := s.match(r.Method, path)
	s.count(r.Method, rt)
	switch r.Method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		writeError(w, &apiError{status: http.StatusNotImplemented, message: fmt.Sprintf("method '%s' not available", r.Method), body: noBody})
		return
	}
	user, aerr := s.authenticate(r, path)
	if aerr == nil {
		c := &call{r: r, user: user}
		c.params, c.upload, aerr = readParams(r)
		if aerr == nil {
			var data any
			data, aerr = s.dispatch(c, rt, path, pathParams)
			if aerr == nil {
				writeData(w, data)
				return
			}
		}
	}
	if aerr.status == http.StatusUnauthorized {
		// pveproxy holds back every 401 until 3 seconds after the request came in.
		time.Sleep(time.Until(start.Add(s.unauthorizedDelay())))
	}
	writeError(w, aerr)
}

func (s *Simulator) count(method string, rt *route) {
	key := method + " ?"
	if rt != nil {
		key = rt.method + " " + rt.pattern
	}
	s.mu.Lock()
	s.requests[key]++
	s.mu.Unlock()
}

// dispatch runs a route's handler under the simulator's lock.
func (s *Simulator) dispatch(c *call, rt *route, path string, pathParams map[string]string) (any, *apiError) {
	if rt == nil {
		return nil, &apiError{status: http.StatusNotImplemented, message: fmt.Sprintf("Method '%s %s' not implemented", c.r.Method, path), asIs: true}
	}
	for k, v := range pathParams {
		if old, ok := c.params[k]; ok && old != v {
			return nil, paramErrorf(k, "duplicate parameter (already defined in URI) with conflicting values!")
		}
		c.params[k] = v
	}
	c.template, c.node = rt.method+" "+rt.pattern, pathParams["node"]
	s.mu.Lock()
	defer s.mu.Unlock()
	// pveproxy checks the privileges before it forwards the request to its node.
	if err := s.checkPermissions(c); err != nil {
		return nil, asAPIError(err)
	}
	if c.node != "" {
		n := s.node(c.node)
		if n == nil {
			return nil, failf("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", c.node, c.node)
		}
		// The node serving the API being offline is modelled like any other: its
		// paths answer 595, while cluster-wide paths keep working.
		if !n.online && !rt.local {
			return nil, &apiError{status: StatusNodeUnreachable, message: "No route to host", body: noBody}
		}
	}
	data, err := rt.handle(c)
	if err != nil {
		return nil, asAPIError(err)
	}
	return s.visible(c, data), nil
}

// asAPIError is err as PVE answers it: its own status, or 500 for a plain die.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return failf("%v", err)
}
