package proxmoxsim

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tokenHeader authenticates as an API token whose secret is "s".
func tokenHeader(id string) http.Header {
	return http.Header{"Authorization": {"PVEAPIToken=" + id + "=s"}}
}

func TestEveryRouteDeclaresItsPermissionCheck(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{}})
	for _, rt := range s.routes {
		if _, ok := routePerms[rt.method+" "+rt.pattern]; !ok {
			t.Errorf("%s %s has no entry in routePerms, so only root@pam may call it", rt.method, rt.pattern)
		}
	}
}

func TestPrivilegesComeFromRolesOnPathsAsPVEComputesThem(t *testing.T) {
	s := start(t, Options{
		Users: map[string]string{"alice@pve": "pw", "bob@pve": "pw", "carol@pve": "pw", "dave@pve": "pw"},
		Tokens: map[string]string{
			"alice@pve!full": "s", "alice@pve!sep": "s", "bob@pve!t": "s", "carol@pve!t": "s", "dave@pve!t": "s",
		},
		PrivSep: []string{"alice@pve!sep"},
		Roles:   map[string][]string{"Starter": {"VM.PowerMgmt", "VM.Audit"}},
		ACL: []ACL{
			{Path: "/", UGID: "alice@pve", Role: "PVEAuditor"},
			{Path: "/vms/9000", UGID: "alice@pve!sep", Role: "Starter"},
			{Path: "/", UGID: "bob@pve", Role: "Administrator"},
			{Path: "/vms/9000", UGID: "bob@pve", Role: "NoAccess"},
			{Path: "/", UGID: "carol@pve", Role: "PVEAuditor", NoPropagate: true},
			{Path: "/", UGID: "dave@pve", Role: "PVETemplateUser"},
		},
	})
	const cfg, start, status = "/nodes/pve1/qemu/9000/config", "/nodes/pve1/qemu/9000/status/start", "/cluster/status"
	tests := []struct {
		name, token, method, path string
		want                      string
	}{
		{name: "an auditor on / reads a VM's config", token: "alice@pve!full", method: "GET", path: cfg, want: "200 OK"},
		{name: "an auditor may not start it", token: "alice@pve!full", method: "POST", path: start,
			want: "403 Permission check failed (/vms/9000, VM.PowerMgmt)"},
		{name: "a separated token has its own ACL's privileges its user also has", token: "alice@pve!sep", method: "GET", path: cfg, want: "200 OK"},
		{name: "but not those its user lacks", token: "alice@pve!sep", method: "POST", path: start,
			want: "403 Permission check failed (/vms/9000, VM.PowerMgmt)"},
		{name: "nor its user's that its own ACL does not grant", token: "alice@pve!sep", method: "GET", path: status,
			want: "403 Permission check failed (/, Sys.Audit)"},
		{name: "NoAccess on a VM trumps Administrator on /", token: "bob@pve!t", method: "GET", path: cfg,
			want: "403 Permission check failed (/vms/9000, VM.Audit)"},
		{name: "Administrator on / reaches the cluster", token: "bob@pve!t", method: "GET", path: status, want: "200 OK"},
		{name: "an entry that does not propagate holds on its path", token: "carol@pve!t", method: "GET", path: status, want: "200 OK"},
		{name: "and not below it", token: "carol@pve!t", method: "GET", path: cfg,
			want: "403 Permission check failed (/vms/9000, VM.Audit)"},
		{name: "a clone needs VM.Clone on the source", token: "alice@pve!full", method: "POST",
			path: "/nodes/pve1/qemu/9000/clone?newid=150", want: "403 Permission check failed (/vms/9000, VM.Clone)"},
		{name: "and VM.Allocate on the new VMID, which PVE does not name", token: "dave@pve!t", method: "POST",
			path: "/nodes/pve1/qemu/9000/clone?newid=150", want: "403 Permission check failed"},
		{name: "the permission check comes before the node lookup", token: "carol@pve!t", method: "GET",
			path: "/nodes/nowhere/qemu/9000/config", want: "403 Permission check failed (/vms/9000, VM.Audit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body := raw(t, s, tt.method, tt.path, tokenHeader(tt.token))
			if got != tt.want {
				t.Errorf("%s %s as %s = %s %s, want %s", tt.method, tt.path, tt.token, got, body, tt.want)
			}
		})
	}

	t.Run("a 403's body carries the message", func(t *testing.T) {
		_, body := raw(t, s, "POST", start, tokenHeader("alice@pve!full"))
		if want := `{"data":null,"message":"Permission check failed (/vms/9000, VM.PowerMgmt)\n"}`; body != want {
			t.Errorf("body %s, want %s", body, want)
		}
	})

	t.Run("listings show only what the caller may audit", func(t *testing.T) {
		for token, want := range map[string][]float64{"alice@pve!sep": {9000}, "bob@pve!t": {}} {
			_, body := raw(t, s, "GET", "/nodes/pve1/qemu", tokenHeader(token))
			var got struct{ Data []map[string]any }
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			ids := make([]float64, 0, len(got.Data))
			for _, vm := range got.Data {
				ids = append(ids, vm["vmid"].(float64))
			}
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("VMs %s sees (-want +got):\n%s", token, diff)
			}
		}
	})

	t.Run("a config key needs its own privilege", func(t *testing.T) {
		got, _ := raw(t, s, "PUT", cfg+"?cores=4", tokenHeader("alice@pve!full"))
		if want := "403 Permission check failed (/vms/9000, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)"; got != want {
			t.Errorf("PUT cores = %s, want %s", got, want)
		}
	})
}

func TestPrivilegesOfAConfigChangeFollowQemuServer(t *testing.T) {
	s := start(t, Options{
		Tokens:   map[string]string{"ops@pve!t": "s"},
		Users:    map[string]string{"ops@pve": "pw"},
		Roles:    map[string][]string{"Sizer": {"VM.Config.CPU", "VM.Config.Disk", "Datastore.AllocateSpace"}},
		ACL:      []ACL{{Path: "/", UGID: "ops@pve", Role: "Sizer"}},
		Storages: DefaultStorages(),
	})
	const cfg = "/nodes/pve1/qemu/9000/config"
	tests := []struct{ query, want string }{
		{query: "?cores=4", want: "200 OK"},
		{query: "?memory=4096", want: "403 Permission check failed (/vms/9000, VM.Config.Memory)"},
		{query: "?ipconfig0=ip=dhcp", want: "403 Permission check failed (/vms/9000, VM.Config.Cloudinit|VM.Config.Network)"},
		{query: "?args=-foo", want: "500 only root can set 'args' config"},
		{query: "?frobnicate=1", want: "400 Parameter verification failed."},
		{query: "?ide2=local-lvm:cloudinit", want: "403 Permission check failed (/vms/9000, VM.Config.Cloudinit)"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			if got, body := raw(t, s, "PUT", cfg+tt.query, tokenHeader("ops@pve!t")); got != tt.want {
				t.Errorf("PUT %s = %s %s, want %s", tt.query, got, body, tt.want)
			}
		})
	}
}
