package proxmoxsim

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rootHeader is the default token's Authorization header.
func (s *Simulator) rootHeader() string { return "PVEAPIToken=" + s.TokenID + "=" + s.TokenSecret }

func TestHAResources(t *testing.T) {
	s := start(t, Options{})
	tests := []struct{ method, path, want string }{
		{"GET", "/cluster/ha/resources/vm:9000", "500 no such resource 'vm:9000'"},
		{"GET", "/cluster/ha/resources/9000", "500 no such resource 'vm:9000'"},
		{"GET", "/cluster/ha/resources/4242", "500 unable do detect SID from VMID - VM/CT 4242 does not exist"},
		{"POST", "/cluster/ha/resources?sid=vm:9000&max_restart=2", "200 OK"},
		{"POST", "/cluster/ha/resources?sid=vm:9000", "500 resource ID 'vm:9000' already defined"},
		{"GET", "/cluster/ha/resources/vm:9000", "200 OK"},
	}
	for _, tt := range tests {
		if got, _ := rootCall(t, s, tt.method, tt.path); got != tt.want {
			t.Errorf("%s %s = %s, want %s", tt.method, tt.path, got, tt.want)
		}
	}
	_, data := rootCall(t, s, "GET", "/cluster/ha/resources/vm:9000")
	r := data.(map[string]any)
	delete(r, "digest")
	if diff := cmp.Diff(map[string]any{"sid": "vm:9000", "type": "vm", "state": "started", "max_restart": float64(2)}, r); diff != "" {
		t.Errorf("resource (-want +got):\n%s", diff)
	}
	_, data = rootCall(t, s, "GET", "/nodes/pve1/qemu/9000/status/current")
	if diff := cmp.Diff(map[string]any{"managed": float64(1), "state": "started", "group": nil}, data.(map[string]any)["ha"]); diff != "" {
		t.Errorf("status/current's ha (-want +got):\n%s", diff)
	}
}

// rootCall calls the API with the default token.
func rootCall(t *testing.T, s *Simulator, method, path string) (string, any) {
	t.Helper()
	status, body := raw(t, s, method, path, map[string][]string{"Authorization": {s.rootHeader()}})
	var env struct{ Data any }
	_ = json.Unmarshal([]byte(body), &env)
	return status, env.Data
}

func TestARunningVMsStatusCarriesQEMUsRuntimeObjects(t *testing.T) {
	s := start(t, Options{})
	for _, q := range []string{
		"/nodes/pve1/qemu/9000/clone?newid=100",
	} {
		if got, _ := rootCall(t, s, "POST", q); got != "200 OK" {
			t.Fatalf("POST %s = %s", q, got)
		}
	}
	waitTasks(t, s)
	for _, q := range []string{
		"/nodes/pve1/qemu/100/config?serial0=socket&vga=serial0,clipboard=vnc&agent=1",
		"/nodes/pve1/qemu/100/status/start",
	} {
		if got, _ := rootCall(t, s, "POST", q); got != "200 OK" {
			t.Fatalf("POST %s = %s", q, got)
		}
		waitTasks(t, s)
	}
	_, data := rootCall(t, s, "GET", "/nodes/pve1/qemu/100/status/current")
	st := data.(map[string]any)
	for _, k := range []string{"nics", "blockstat", "ballooninfo", "proxmox-support", "ha", "running-qemu", "running-machine", "diskread", "freemem"} {
		if _, ok := st[k]; !ok {
			t.Errorf("status/current lacks %s: %v", k, slices.Sorted(maps.Keys(st)))
		}
	}
	if st["serial"] != float64(1) || st["clipboard"] != "vnc" || st["agent"] != float64(1) {
		t.Errorf("serial %v, clipboard %v, agent %v; want 1, vnc, 1", st["serial"], st["clipboard"], st["agent"])
	}
	if _, ok := st["nics"].(map[string]any)["tap100i0"]; !ok {
		t.Errorf("nics %v, want tap100i0", st["nics"])
	}

	_, data = rootCall(t, s, "GET", "/nodes/pve1/qemu/100/agent/network-get-interfaces")
	for _, iface := range data.(map[string]any)["result"].([]any) {
		stats := iface.(map[string]any)["statistics"].(map[string]any)
		want := []string{"rx-bytes", "rx-dropped", "rx-errs", "rx-packets", "tx-bytes", "tx-dropped", "tx-errs", "tx-packets"}
		if diff := cmp.Diff(want, slices.Sorted(maps.Keys(stats))); diff != "" {
			t.Errorf("%v's statistics (-want +got):\n%s", iface.(map[string]any)["name"], diff)
		}
	}
}

// waitTasks waits until no task runs.
func waitTasks(t *testing.T, s *Simulator) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !slices.ContainsFunc(s.Tasks(), func(t Task) bool { return t.Running }) {
			return
		}
	}
	t.Fatal("tasks still running after 5s")
}

func TestCloudInitIsRenderedFromTheCIKeys(t *testing.T) {
	s := start(t, Options{})
	rootCall(t, s, "POST", "/nodes/pve1/qemu/9000/clone?newid=100&name=web.example.org")
	waitTasks(t, s)
	q := "/nodes/pve1/qemu/100/config?ciuser=ops&cipassword=hunter2&sshkeys=ssh-ed25519%2520AAAA%2520ops%250A" +
		"&ipconfig0=ip%3D10.1.2.3%2F24%2Cgw%3D10.1.2.1&nameserver=10.1.0.53&ciupgrade=0"
	if got, _ := rootCall(t, s, "PUT", q); got != "200 OK" {
		t.Fatalf("PUT = %s", got)
	}
	conf, _ := s.VM(100)
	mac := strings.ToLower(netMAC(conf["net0"]))
	tests := []struct{ typ, want string }{
		{"user", "#cloud-config\nhostname: web\nmanage_etc_hosts: true\nfqdn: web.example.org\nuser: ops\npassword: hunter2\n" +
			"ssh_authorized_keys:\n  - ssh-ed25519 AAAA ops\nchpasswd:\n  expire: False\nusers:\n  - default\n"},
		{"network", "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      mac_address: '" + mac + "'\n      subnets:\n" +
			"      - type: static\n        address: '10.1.2.3'\n        netmask: '255.255.255.0'\n        gateway: '10.1.2.1'\n" +
			"    - type: nameserver\n      address:\n      - '10.1.0.53'\n"},
	}
	for _, tt := range tests {
		if _, got := rootCall(t, s, "GET", "/nodes/pve1/qemu/100/cloudinit/dump?type="+tt.typ); got != tt.want {
			t.Errorf("%s dump:\n%v\nwant:\n%s", tt.typ, got, tt.want)
		}
	}
	if _, meta := rootCall(t, s, "GET", "/nodes/pve1/qemu/100/cloudinit/dump?type=meta"); !strings.HasPrefix(meta.(string), "instance-id: ") || len(meta.(string)) != len("instance-id: \n")+40 {
		t.Errorf("meta dump %q, want an instance-id of 40 hex digits", meta)
	}
	_, ci := rootCall(t, s, "GET", "/nodes/pve1/qemu/100/cloudinit")
	keys := map[string]any{}
	for _, item := range ci.([]any) {
		keys[item.(map[string]any)["key"].(string)] = item.(map[string]any)["value"]
	}
	if keys["cipassword"] != "**********" || keys["ciuser"] != "ops" {
		t.Errorf("cloudinit %v, want the user and a masked password", keys)
	}
	_, pending := rootCall(t, s, "GET", "/nodes/pve1/qemu/100/pending")
	found := false
	for _, item := range pending.([]any) {
		if m := item.(map[string]any); m["key"] == "ciuser" && m["value"] == "ops" && m["pending"] == nil {
			found = true
		}
	}
	if !found {
		t.Errorf("pending %v lacks ciuser=ops without a pending value", pending)
	}
}

func TestDeletingARunningTaskStopsIt(t *testing.T) {
	s := start(t, Options{TaskDelays: map[string]time.Duration{"qmclone": time.Minute}})
	_, upid := rootCall(t, s, "POST", "/nodes/pve1/qemu/9000/clone?newid=100")
	if got, _ := rootCall(t, s, "DELETE", "/nodes/pve1/tasks/"+upid.(string)); got != "200 OK" {
		t.Fatalf("DELETE = %s", got)
	}
	waitTasks(t, s)
	_, st := rootCall(t, s, "GET", "/nodes/pve1/tasks/"+upid.(string)+"/status")
	// The clone's worker catches the signal's die, as qemu-server's does.
	if got := st.(map[string]any)["exitstatus"]; got != "clone failed: interrupted by signal" {
		t.Errorf("exit status %v, want clone failed: interrupted by signal", got)
	}
	if _, ok := s.VM(100); ok {
		t.Error("the interrupted clone left VM 100")
	}
	if got, _ := rootCall(t, s, "DELETE", "/nodes/pve1/tasks/UPID:pve1:nonsense"); got != "400 Parameter verification failed." {
		t.Errorf("DELETE of a malformed UPID = %s", got)
	}
}
