package proxmoxsim

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
)

// ACL is one entry of PVE's access control list (an acl line of user.cfg): a role
// granted to a user or an API token on a path.
type ACL struct {
	// Path is the object: /, /vms/<vmid>, /storage/<id>, /pool/<name>, /nodes/<node>,
	// /sdn/zones/<zone>/<bridge>, …
	Path string
	// UGID is the user (user@realm) or API token (user@realm!name) it is for; the
	// simulator has no groups.
	UGID string
	// Role is a built-in role or one of Options.Roles.
	Role string
	// NoPropagate limits the entry to Path itself; PVE's entries propagate to the
	// paths below by default.
	NoPropagate bool
}

// privGroups are PVE's privileges by category, split as pve-access-control splits
// them to make the built-in roles: root-only, admin, user and audit privileges.
var privGroups = []struct {
	cat                      string
	root, admin, user, audit []string
}{
	{cat: "VM",
		admin: []string{"VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
			"VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.Migrate", "VM.Monitor", "VM.Snapshot", "VM.Snapshot.Rollback"},
		user:  []string{"VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.PowerMgmt"},
		audit: []string{"VM.Audit"}},
	{cat: "Sys",
		root:  []string{"Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"},
		admin: []string{"Sys.Console", "Sys.Syslog"},
		audit: []string{"Sys.Audit"}},
	{cat: "Datastore",
		admin: []string{"Datastore.Allocate", "Datastore.AllocateTemplate"},
		user:  []string{"Datastore.AllocateSpace"},
		audit: []string{"Datastore.Audit"}},
	{cat: "SDN",
		admin: []string{"SDN.Allocate", "SDN.Audit"},
		user:  []string{"SDN.Use"},
		audit: []string{"SDN.Audit"}},
	{cat: "User",
		root:  []string{"Realm.Allocate"},
		admin: []string{"User.Modify", "Group.Allocate", "Realm.AllocateUser"}},
	{cat: "Pool",
		admin: []string{"Pool.Allocate"},
		user:  []string{"Pool.Audit"},
		audit: []string{"Pool.Audit"}},
	{cat: "Mapping",
		admin: []string{"Mapping.Modify"},
		user:  []string{"Mapping.Use"},
		audit: []string{"Mapping.Audit"}},
}

// builtinRoles are PVE's built-in roles, made as create_roles makes them: NoAccess,
// Administrator (every privilege), PVE<category>Admin, PVE<category>User, PVEAdmin,
// PVEAuditor and PVETemplateUser.
func builtinRoles() map[string]map[string]bool {
	roles := map[string]map[string]bool{"NoAccess": {}, "Administrator": {"Permissions.Modify": true}, "PVEAdmin": {}, "PVEAuditor": {}}
	add := func(role string, privs ...[]string) {
		if roles[role] == nil {
			roles[role] = map[string]bool{}
		}
		for _, list := range privs {
			for _, p := range list {
				roles[role][p] = true
			}
		}
	}
	for _, g := range privGroups {
		add("Administrator", g.root, g.admin, g.user, g.audit)
		add("PVE"+g.cat+"Admin", g.admin, g.user, g.audit)
		add("PVEAdmin", g.admin, g.user, g.audit)
		if len(g.user) > 0 {
			add("PVE"+g.cat+"User", g.user, g.audit)
		}
		add("PVEAuditor", g.audit)
	}
	// Only Administrator and PVEMappingAdmin may change mappings.
	delete(roles["PVEAdmin"], "Mapping.Modify")
	add("PVETemplateUser", []string{"VM.Clone", "VM.Audit"})
	return roles
}

// aclConfig is the simulator's user.cfg: roles, ACL entries and which tokens have
// privilege separation. It does not change after Start.
type aclConfig struct {
	roles map[string]map[string]bool
	// entries maps a normalised path to a user or token to its roles there, each with
	// its propagate flag.
	entries map[string]map[string]map[string]bool
	privsep map[string]bool
}

func newACLConfig(o Options, tokens map[string]string) (*aclConfig, error) {
	a := &aclConfig{roles: builtinRoles(), entries: map[string]map[string]map[string]bool{}, privsep: map[string]bool{}}
	for name, privs := range o.Roles {
		if a.roles[name] != nil {
			return nil, fmt.Errorf("role %q is built in", name)
		}
		a.roles[name] = map[string]bool{}
		for _, p := range privs {
			if !a.roles["Administrator"][p] {
				return nil, fmt.Errorf("role %q: invalid privilege '%s'", name, p)
			}
			a.roles[name][p] = true
		}
	}
	for _, e := range o.ACL {
		if a.roles[e.Role] == nil {
			return nil, fmt.Errorf("ACL on %s for %s: role '%s' does not exist", e.Path, e.UGID, e.Role)
		}
		p := normalizePath(e.Path)
		if a.entries[p] == nil {
			a.entries[p] = map[string]map[string]bool{}
		}
		if a.entries[p][e.UGID] == nil {
			a.entries[p][e.UGID] = map[string]bool{}
		}
		a.entries[p][e.UGID][e.Role] = !e.NoPropagate
	}
	for _, id := range o.PrivSep {
		if _, ok := tokens[id]; !ok {
			return nil, fmt.Errorf("PrivSep names %q, which is not an API token", id)
		}
		a.privsep[id] = true
	}
	return a, nil
}

// normalizePath is PVE's normalize_path: one slash between parts, none at the end.
func normalizePath(p string) string {
	return path.Clean("/" + p)
}

// rolesOn is PVE's AccessControl::roles for one user or token: walking from / down to
// p, the entries on each path that apply there (all on p itself, the propagating ones
// above it) replace what was found above. NoAccess trumps every other role.
func (a *aclConfig) rolesOn(ugid, p string) map[string]bool {
	out := map[string]bool{}
	parts := strings.FieldsFunc(normalizePath(p), func(r rune) bool { return r == '/' })
	cur := ""
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			cur += "/" + parts[i]
		}
		final := i == len(parts)-1
		found := map[string]bool{}
		for role, propagate := range a.entries[cmp.Or(cur, "/")][ugid] {
			if final || propagate {
				found[role] = propagate
			}
		}
		if len(found) > 0 {
			out = found
		}
	}
	if _, ok := out["NoAccess"]; ok {
		return map[string]bool{"NoAccess": out["NoAccess"]}
	}
	return out
}

// privileges is PVE's RPCEnvironment::permissions: what user (or API token) may do on
// p. root@pam may do anything; a token without privilege separation has its user's
// privileges, one with it those its own entries grant that its user has too. Roles on
// a pool reach the VMs in it.
func (s *Simulator) privileges(user, p string) map[string]bool {
	if user == DefaultUsername {
		return s.acl.roles["Administrator"]
	}
	owner, _, isToken := strings.Cut(user, "!")
	if isToken {
		if _, ok := s.tokens[user]; !ok {
			return nil
		}
		ownerPrivs := s.privileges(owner, p)
		if !s.acl.privsep[user] {
			return ownerPrivs
		}
		own := s.rolePrivileges(user, p)
		maps.DeleteFunc(own, func(priv string, _ bool) bool { return !ownerPrivs[priv] })
		return own
	}
	if _, ok := s.users[user]; !ok {
		return nil
	}
	return s.rolePrivileges(user, p)
}

func (s *Simulator) rolePrivileges(ugid, p string) map[string]bool {
	roles := s.acl.rolesOn(ugid, p)
	if _, denied := roles["NoAccess"]; !denied {
		if pool := s.poolOf(p); pool != "" {
			poolRoles := s.acl.rolesOn(ugid, "/pool/"+pool)
			if _, ok := poolRoles["NoAccess"]; ok {
				roles = poolRoles
			} else {
				for r := range poolRoles {
					if _, ok := roles[r]; !ok {
						roles[r] = false
					}
				}
			}
		}
	}
	out := map[string]bool{}
	for r := range roles {
		for priv := range s.acl.roles[r] {
			out[priv] = true
		}
	}
	return out
}

// poolOf is the pool of the VM a /vms/<vmid> path names.
func (s *Simulator) poolOf(p string) string {
	rest, ok := strings.CutPrefix(normalizePath(p), "/vms/")
	if !ok {
		return ""
	}
	id, err := strconv.Atoi(rest)
	if err != nil || s.vms[id] == nil {
		return ""
	}
	return s.vms[id].pool
}

// check is RPCEnvironment::check: every one of privs on p, or 403 naming the first
// missing one.
func (s *Simulator) check(c *call, p string, privs ...string) error {
	have := s.privileges(c.user, p)
	for _, priv := range privs {
		if !have[priv] {
			return permissionDenied(normalizePath(p) + ", " + priv)
		}
	}
	return nil
}

// checkAny is RPCEnvironment::check_any: one of privs on p, or 403 naming them all.
func (s *Simulator) checkAny(c *call, p string, privs ...string) error {
	have := s.privileges(c.user, p)
	for _, priv := range privs {
		if have[priv] {
			return nil
		}
	}
	return permissionDenied(normalizePath(p) + ", " + strings.Join(privs, "|"))
}

func (s *Simulator) allowed(c *call, p string, privs ...string) bool {
	return s.check(c, p, privs...) == nil
}

// fill replaces the {name} parts of an ACL path template by the call's parameters,
// as PVE's template_replace does.
func fill(c *call, tmpl string) string {
	for k, v := range c.params {
		tmpl = strings.ReplaceAll(tmpl, "{"+k+"}", v)
	}
	return tmpl
}

// permCheck is one API method's permission check.
type permCheck func(s *Simulator, c *call) error

// anyone is a method every authenticated user may call (PVE's user => 'all'); the
// answer may be filtered (see visible).
func anyone(*Simulator, *call) error { return nil }

// perm is PVE's ['perm', path, privs]: every one of privs on the path template.
func perm(tmpl string, privs ...string) permCheck {
	return func(s *Simulator, c *call) error { return s.check(c, fill(c, tmpl), privs...) }
}

// permAny is ['perm', path, privs, any => 1].
func permAny(tmpl string, privs ...string) permCheck {
	return func(s *Simulator, c *call) error { return s.checkAny(c, fill(c, tmpl), privs...) }
}

// ownTaskOr lets the task's owner through, and others with privs on its node.
func ownTaskOr(priv string) permCheck {
	return func(s *Simulator, c *call) error {
		// A malformed UPID passes: the handler complains about it.
		if u, err := ParseUPID(c.params["upid"]); err == nil && !taskOwner(u.User, c.user) {
			return s.check(c, "/nodes/"+c.node, priv)
		}
		return nil
	}
}

// taskOwner is Tasks.pm's check_task_user: a token sees its own tasks, a user its
// own and its tokens'.
func taskOwner(taskUser, user string) bool {
	owner, _, _ := strings.Cut(taskUser, "!")
	return taskUser == user || owner == user
}

// routePerms are the permission checks of the API methods, as their schemas in
// qemu-server, pve-manager, pve-storage, pve-access-control and pve-ha-manager
// (PVE 8.4) declare them, with the checks their handlers make on top.
var routePerms = map[string]permCheck{
	"GET /version":                                         anyone,
	"GET /access/domains":                                  anyone,
	"GET /access/ticket":                                   anyone,
	"POST /access/ticket":                                  anyone,
	"GET /access/permissions":                              anyone,
	"GET /cluster/status":                                  perm("/", "Sys.Audit"),
	"GET /cluster/resources":                               anyone,
	"GET /cluster/nextid":                                  anyone,
	"GET /cluster/tasks":                                   anyone,
	"GET /cluster/ha/resources":                            perm("/", "Sys.Audit"),
	"GET /cluster/ha/resources/{sid}":                      perm("/", "Sys.Audit"),
	"POST /cluster/ha/resources":                           perm("/", "Sys.Console"),
	"GET /pools":                                           anyone,
	"POST /pools":                                          perm("/pool/{poolid}", "Pool.Allocate"),
	"GET /pools/{poolid}":                                  perm("/pool/{poolid}", "Pool.Audit"),
	"GET /storage":                                         anyone,
	"GET /storage/{storage}":                               perm("/storage/{storage}", "Datastore.Allocate"),
	"GET /nodes":                                           anyone,
	"GET /nodes/{node}/status":                             perm("/nodes/{node}", "Sys.Audit"),
	"GET /nodes/{node}/version":                            anyone,
	"GET /nodes/{node}/network":                            anyone,
	"GET /nodes/{node}/network/{iface}":                    perm("/nodes/{node}", "Sys.Audit"),
	"GET /nodes/{node}/tasks":                              anyone,
	"GET /nodes/{node}/tasks/{upid}/status":                ownTaskOr("Sys.Audit"),
	"GET /nodes/{node}/tasks/{upid}/log":                   ownTaskOr("Sys.Audit"),
	"DELETE /nodes/{node}/tasks/{upid}":                    ownTaskOr("Sys.Modify"),
	"GET /nodes/{node}/storage":                            anyone,
	"GET /nodes/{node}/storage/{storage}/status":           permAny("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace"),
	"GET /nodes/{node}/storage/{storage}/content":          permAny("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace"),
	"GET /nodes/{node}/storage/{storage}/content/{volume}": func(s *Simulator, c *call) error { return s.checkVolumeAccess(c, 0, volumeID(c)) },
	"DELETE /nodes/{node}/storage/{storage}/content/{volume}": func(s *Simulator, c *call) error {
		sid, _, _ := strings.Cut(volumeID(c), ":")
		return s.check(c, "/storage/"+sid, "Datastore.Allocate")
	},
	"POST /nodes/{node}/storage/{storage}/upload": perm("/storage/{storage}", "Datastore.AllocateTemplate"),
	"POST /nodes/{node}/storage/{storage}/download-url": func(s *Simulator, c *call) error {
		if err := s.check(c, fill(c, "/storage/{storage}"), "Datastore.AllocateTemplate"); err != nil {
			return err
		}
		if s.allowed(c, "/", "Sys.Audit", "Sys.Modify") || s.allowed(c, "/nodes/"+c.node, "Sys.AccessNetwork") {
			return nil
		}
		return permissionDenied("")
	},
	"GET /nodes/{node}/qemu":                       anyone,
	"POST /nodes/{node}/qemu":                      checkCreate,
	"DELETE /nodes/{node}/qemu/{vmid}":             perm("/vms/{vmid}", "VM.Allocate"),
	"GET /nodes/{node}/qemu/{vmid}/config":         perm("/vms/{vmid}", "VM.Audit"),
	"POST /nodes/{node}/qemu/{vmid}/config":        checkConfigUpdate,
	"PUT /nodes/{node}/qemu/{vmid}/config":         checkConfigUpdate,
	"GET /nodes/{node}/qemu/{vmid}/pending":        perm("/vms/{vmid}", "VM.Audit"),
	"GET /nodes/{node}/qemu/{vmid}/cloudinit":      perm("/vms/{vmid}", "VM.Audit"),
	"GET /nodes/{node}/qemu/{vmid}/cloudinit/dump": perm("/vms/{vmid}", "VM.Audit"),
	"PUT /nodes/{node}/qemu/{vmid}/resize":         checkResize,
	"POST /nodes/{node}/qemu/{vmid}/template":      perm("/vms/{vmid}", "VM.Allocate"),
	"POST /nodes/{node}/qemu/{vmid}/clone":         checkClone,
	"GET /nodes/{node}/qemu/{vmid}/status/current": perm("/vms/{vmid}", "VM.Audit"),
	// PVE 8 guards every guest agent command with VM.Monitor (PVE 9 splits it into
	// VM.GuestAgent.*).
	"GET /nodes/{node}/qemu/{vmid}/agent/{command}":  perm("/vms/{vmid}", "VM.Monitor"),
	"POST /nodes/{node}/qemu/{vmid}/agent/{command}": perm("/vms/{vmid}", "VM.Monitor"),
	"POST /nodes/{node}/qemu/{vmid}/status/start":    perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/stop":     perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/shutdown": perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/reboot":   perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/reset":    perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/suspend":  perm("/vms/{vmid}", "VM.PowerMgmt"),
	"POST /nodes/{node}/qemu/{vmid}/status/resume":   perm("/vms/{vmid}", "VM.PowerMgmt"),
}

// checkPermissions runs the method's permission check, as pveproxy does before the
// handler (and before forwarding the request to its node). A method without a
// declared check is root@pam's alone, as in PVE.
func (s *Simulator) checkPermissions(c *call) error {
	if c.user == "" || c.user == DefaultUsername {
		return nil
	}
	check, ok := routePerms[c.template]
	if !ok {
		return permissionDenied("user != root@pam")
	}
	return check(s, c)
}

// volumeID is the volume a storage content path names, storage:name.
func volumeID(c *call) string {
	v := c.params["volume"]
	if strings.Contains(v, ":") {
		return v
	}
	return c.params["storage"] + ":" + v
}

// checkVolumeAccess is PVE::Storage::check_volume_access: Datastore.Allocate on the
// storage allows anything; ISOs, templates and imports need read access to it; a
// VM's own disks are its own; another VM's disks need Datastore.Audit and
// VM.Config.Disk on that VM.
func (s *Simulator) checkVolumeAccess(c *call, vmid int, volid string) error {
	sid, _, ok := strings.Cut(volid, ":")
	if !ok {
		return failf("Only root can pass arbitrary filesystem paths.")
	}
	if s.allowed(c, "/storage/"+sid, "Datastore.Allocate") {
		return nil
	}
	_, vol := s.findVolume(cmp.Or(c.node, s.entry().name), volid)
	switch {
	case vol == nil:
		return nil // the handler says it does not exist
	case vol.content == "iso" || vol.content == "vztmpl" || vol.content == "import":
		return s.checkAny(c, "/storage/"+sid, "Datastore.AllocateSpace", "Datastore.Audit")
	case vol.vmid != 0 && vol.vmid == vmid:
		return nil
	case vol.vmid != 0 && vol.content == "images":
		if err := s.check(c, "/storage/"+sid, "Datastore.Audit"); err != nil {
			return err
		}
		return s.check(c, fmt.Sprintf("/vms/%d", vol.vmid), "VM.Config.Disk")
	}
	return failf("missing privileges to access %s", volid)
}

// Config keys by the privilege qemu-server's check_vm_modify_config_perm asks for.
var (
	cpuKeys       = []string{"cores", "cpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus", "affinity"}
	memoryKeys    = []string{"memory", "balloon", "shares"}
	hwTypeKeys    = []string{"acpi", "hotplug", "kvm", "machine", "scsihw", "smbios1", "tablet", "vga", "watchdog", "audio0", "rng0"}
	optionKeys    = []string{"agent", "autostart", "bios", "description", "keyboard", "localtime", "migrate_downtime", "migrate_speed", "name", "onboot", "ostype", "protection", "reboot", "startdate", "startup", "tdf", "template", "tags"}
	diskKeys      = []string{"boot", "bootdisk", "vmstatestorage"}
	cloudinitKeys = []string{"cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys"}
)

// configKeyPrivilege is the privilege on /vms/<vmid> a config key needs, as
// check_vm_modify_config_perm (and assert_tag_permissions for tags) decides; anyOf
// marks keys that need one of two. Drives are checked by their value.
func configKeyPrivilege(k string) (privs []string, anyOf bool, err error) {
	switch {
	case slices.Contains(cpuKeys, k) || strings.HasPrefix(k, "numa"):
		return []string{"VM.Config.CPU"}, false, nil
	case slices.Contains(memoryKeys, k):
		return []string{"VM.Config.Memory"}, false, nil
	case slices.Contains(hwTypeKeys, k) || strings.HasPrefix(k, "serial") || strings.HasPrefix(k, "usb"):
		return []string{"VM.Config.HWType"}, false, nil
	case slices.Contains(optionKeys, k):
		return []string{"VM.Config.Options"}, false, nil
	case k == "freeze":
		return []string{"VM.PowerMgmt"}, false, nil
	case slices.Contains(diskKeys, k) || strings.HasPrefix(k, "unused"):
		return []string{"VM.Config.Disk"}, false, nil
	case netPattern.MatchString(k):
		return []string{"VM.Config.Network"}, false, nil
	case slices.Contains(cloudinitKeys, k) || strings.HasPrefix(k, "ipconfig"):
		return []string{"VM.Config.Cloudinit", "VM.Config.Network"}, true, nil
	}
	return nil, false, failf("only root can set '%s' config", k)
}

// createControlParams are the parameters of create_vm that are not config keys.
var (
	createControlParams = []string{"node", "vmid", "archive", "bwlimit", "force", "pool", "start", "storage", "unique", "live-restore", "import-working-storage"}
)

// checkConfigUpdate is update_vm_api's checks: one of the VM.Config.* privileges to
// call it at all, then each key's privilege, the drives' (CDROM, cloud-init or disk),
// the storages of new disks and the bridges of NICs.
func checkConfigUpdate(s *Simulator, c *call) error {
	vmPath := fill(c, "/vms/{vmid}")
	if err := s.checkAny(c, vmPath, "VM.Config.Disk", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Memory",
		"VM.Config.Network", "VM.Config.HWType", "VM.Config.Options", "VM.Config.Cloudinit"); err != nil {
		return err
	}
	vmid, _ := strconv.Atoi(c.params["vmid"])
	var current map[string]string
	if v := s.vms[vmid]; v != nil {
		current = v.conf
	}
	for _, k := range splitList(c.params["delete"]) {
		if k == "cdrom" {
			k = "ide2"
		}
		if !configKey.MatchString(k) {
			continue
		}
		if driveKey.MatchString(k) {
			if err := s.checkDrivePrivileges(c, vmPath, current[k]); err != nil {
				return err
			}
			continue
		}
		if err := s.checkConfigKey(c, vmPath, k); err != nil {
			return err
		}
	}
	return s.checkConfigParams(c, vmid, vmPath, updateParams, true)
}

// checkCreate is create_vm's checks: Datastore.AllocateSpace on the storage
// parameter, VM.Allocate on the VMID or its pool, then what the config keys, disks
// and bridges need.
func checkCreate(s *Simulator, c *call) error {
	if st := c.params["storage"]; st != "" {
		if err := s.check(c, "/storage/"+st, "Datastore.AllocateSpace"); err != nil {
			return err
		}
	}
	vmPath := fill(c, "/vms/{vmid}")
	pool := c.params["pool"]
	if !s.allowed(c, vmPath, "VM.Allocate") && (pool == "" || !s.allowed(c, "/pool/"+pool, "VM.Allocate")) {
		return permissionDenied("")
	}
	vmid, _ := strconv.Atoi(c.params["vmid"])
	return s.checkConfigParams(c, vmid, vmPath, createControlParams, false)
}

// checkConfigParams checks the config keys a create or update sets. An update also
// checks each drive's own privilege; a create's VM.Allocate covers them.
func (s *Simulator) checkConfigParams(c *call, vmid int, vmPath string, control []string, update bool) error {
	for _, k := range slices.Sorted(maps.Keys(c.params)) {
		val := c.params[k]
		// PVE verifies the parameters against the schema before its handler checks
		// the keys: an unknown key gets the schema's 400.
		if slices.Contains(control, k) || !configKey.MatchString(k) {
			continue
		}
		if !driveKey.MatchString(k) {
			if err := s.checkConfigKey(c, vmPath, k); err != nil {
				return err
			}
			if netPattern.MatchString(k) {
				if err := s.checkBridge(c, val); err != nil {
					return err
				}
			}
			continue
		}
		if update {
			if err := s.checkDrivePrivileges(c, vmPath, val); err != nil {
				return err
			}
		}
		if err := s.checkDriveStorage(c, vmid, val, c.params["storage"]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Simulator) checkConfigKey(c *call, vmPath, k string) error {
	privs, anyOf, err := configKeyPrivilege(k)
	if err != nil {
		return err
	}
	if anyOf {
		return s.checkAny(c, vmPath, privs...)
	}
	if err := s.check(c, vmPath, privs...); err != nil {
		return err
	}
	if k == "startup" {
		return s.check(c, "/", "Sys.Modify")
	}
	return nil
}

// checkDrivePrivileges is update_vm_api's check_drive_perms: a cloud-init drive
// needs VM.Config.Cloudinit and VM.Config.CDROM, a CD-ROM VM.Config.CDROM, a disk
// VM.Config.Disk.
func (s *Simulator) checkDrivePrivileges(c *call, vmPath, val string) error {
	p := parseProperty(val, "file")
	switch {
	case isCloudinitVolume(p.first):
		return s.check(c, vmPath, "VM.Config.Cloudinit", "VM.Config.CDROM")
	case p.isCDROM():
		return s.check(c, vmPath, "VM.Config.CDROM")
	}
	return s.check(c, vmPath, "VM.Config.Disk")
}

func isCloudinitVolume(file string) bool {
	_, name, _ := strings.Cut(file, ":")
	return file == "cloudinit" || name == "cloudinit" || strings.Contains(name, "cloudinit")
}

// checkDriveStorage is check_storage_access for one drive: a new disk needs
// Datastore.AllocateSpace on its storage, an existing volume access to it, a disk
// imported from another VM's VM.Clone on that VM.
func (s *Simulator) checkDriveStorage(c *call, vmid int, val, defaultStorage string) error {
	p := parseProperty(val, "file")
	switch {
	case p.first == "" || p.first == "none" || isCloudinitVolume(p.first):
	case p.first == "cdrom" && p.isCDROM():
		return s.check(c, "/", "Sys.Console")
	case !p.isCDROM() && newDiskPattern.MatchString(p.first):
		sid := cmp.Or(newDiskPattern.FindStringSubmatch(p.first)[1], defaultStorage)
		if sid == "" {
			return nil // the handler complains
		}
		if err := s.check(c, "/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
			return err
		}
	default:
		if err := s.checkVolumeAccess(c, vmid, p.first); err != nil {
			return err
		}
	}
	if src := p.opts["import-from"]; src != "" {
		_, vol := s.findVolume(cmp.Or(c.node, s.entry().name), src)
		if vol != nil && vol.vmid != 0 && vol.content == "images" {
			return s.check(c, fmt.Sprintf("/vms/%d", vol.vmid), "VM.Clone")
		}
		return s.checkVolumeAccess(c, vmid, src)
	}
	return nil
}

// checkBridge is check_bridge_access: SDN.Use on the bridge (in the localnetwork
// zone, the simulator having no SDN), or on its VLAN when the NIC has a tag.
func (s *Simulator) checkBridge(c *call, netValue string) error {
	_, _, p := parseNet(netValue)
	bridge := p.opts["bridge"]
	if bridge == "" {
		return nil
	}
	zonePath := "/sdn/zones/localnetwork/" + bridge
	if tag := p.opts["tag"]; tag != "" {
		return s.check(c, zonePath+"/"+tag, "SDN.Use")
	}
	return s.check(c, zonePath, "SDN.Use")
}

// checkClone is clone_vm's checks: VM.Clone on the source and VM.Allocate on the new
// VMID or the pool (PVE says only "Permission check failed" when neither is there),
// then in its handler Datastore.AllocateSpace on the storage of every disk (or the
// target storage) and SDN.Use on the source's bridges.
func checkClone(s *Simulator, c *call) error {
	if err := s.check(c, fill(c, "/vms/{vmid}"), "VM.Clone"); err != nil {
		return err
	}
	pool := c.params["pool"]
	if !s.allowed(c, "/vms/"+c.params["newid"], "VM.Allocate") && (pool == "" || !s.allowed(c, "/pool/"+pool, "VM.Allocate")) {
		return permissionDenied("")
	}
	vmid, _ := strconv.Atoi(c.params["vmid"])
	src := s.vms[vmid]
	if src == nil {
		return nil // the handler says it does not exist
	}
	for _, k := range slices.Sorted(maps.Keys(src.conf)) {
		val := src.conf[k]
		switch {
		case driveKey.MatchString(k):
			p := parseProperty(val, "file")
			if p.isCDROM() || p.first == "none" {
				if p.first == "cdrom" {
					if err := s.check(c, "/", "Sys.Console"); err != nil {
						return err
					}
				}
				continue
			}
			sid, _, _ := strings.Cut(p.first, ":")
			if err := s.check(c, "/storage/"+cmp.Or(c.params["storage"], sid), "Datastore.AllocateSpace"); err != nil {
				return err
			}
		case netPattern.MatchString(k):
			if err := s.checkBridge(c, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkResize is resize_vm's checks: VM.Config.Disk on the VM, and in its handler
// Datastore.AllocateSpace on the disk's storage.
func checkResize(s *Simulator, c *call) error {
	if err := s.check(c, fill(c, "/vms/{vmid}"), "VM.Config.Disk"); err != nil {
		return err
	}
	vmid, _ := strconv.Atoi(c.params["vmid"])
	if v := s.vms[vmid]; v != nil {
		if sid, _, ok := strings.Cut(parseProperty(v.conf[c.params["disk"]], "file").first, ":"); ok {
			return s.check(c, "/storage/"+sid, "Datastore.AllocateSpace")
		}
	}
	return nil
}

// splitList is PVE's split_list: items separated by commas, semicolons, NULs or
// white space.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == 0 || r == ' ' || r == '\t' || r == '\n' })
}

// visible filters what a listing answers to what the caller may see, as PVE's index
// methods do: VMs with VM.Audit, storages with Datastore.Audit or
// Datastore.AllocateSpace, pools with Pool.Audit, nodes' details with Sys.Audit,
// others' tasks with Sys.Audit on their node.
func (s *Simulator) visible(c *call, data any) any {
	if c.user == "" || c.user == DefaultUsername {
		return data
	}
	list, ok := data.([]map[string]any)
	if !ok {
		return data
	}
	var keep func(map[string]any) bool
	switch c.template {
	case "GET /cluster/resources":
		keep = func(r map[string]any) bool {
			switch r["type"] {
			case "qemu", "lxc":
				return s.allowed(c, fmt.Sprintf("/vms/%v", r["vmid"]), "VM.Audit")
			case "storage":
				return s.allowed(c, fmt.Sprintf("/storage/%v", r["storage"]), "Datastore.Audit")
			case "pool":
				return s.allowed(c, fmt.Sprintf("/pool/%v", r["pool"]), "Pool.Audit")
			case "sdn":
				return s.allowed(c, "/sdn/zones/localnetwork", "SDN.Audit")
			}
			return true
		}
	case "GET /nodes/{node}/qemu":
		keep = func(r map[string]any) bool { return s.allowed(c, fmt.Sprintf("/vms/%v", r["vmid"]), "VM.Audit") }
	case "GET /storage", "GET /nodes/{node}/storage":
		keep = func(r map[string]any) bool {
			return s.checkAny(c, fmt.Sprintf("/storage/%v", r["storage"]), "Datastore.Audit", "Datastore.AllocateSpace") == nil
		}
	case "GET /pools":
		keep = func(r map[string]any) bool { return s.allowed(c, fmt.Sprintf("/pool/%v", r["poolid"]), "Pool.Audit") }
	case "GET /nodes/{node}/tasks", "GET /cluster/tasks":
		keep = func(r map[string]any) bool {
			user := fmt.Sprint(r["user"])
			if tok, ok := r["tokenid"]; ok {
				user += fmt.Sprintf("!%v", tok)
			}
			return taskOwner(user, c.user) || s.allowed(c, fmt.Sprintf("/nodes/%v", r["node"]), "Sys.Audit")
		}
	case "GET /nodes/{node}/storage/{storage}/content":
		keep = func(r map[string]any) bool { return s.checkVolumeAccess(c, 0, fmt.Sprint(r["volid"])) == nil }
	default:
		return data
	}
	out := make([]map[string]any, 0, len(list))
	for _, r := range list {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// getPermissions is GET /access/permissions: the caller's privileges on a path, or on
// / and every path an ACL entry of theirs (or their token's user's) names.
func (s *Simulator) getPermissions(c *call) (any, error) {
	paths := []string{"/"}
	if p := c.params["path"]; p != "" {
		paths = []string{normalizePath(p)}
	} else {
		owner, _, _ := strings.Cut(c.user, "!")
		for p, byUser := range s.acl.entries {
			if _, ok := byUser[c.user]; ok {
				paths = append(paths, p)
			} else if _, ok := byUser[owner]; ok {
				paths = append(paths, p)
			}
		}
	}
	out := map[string]map[string]int{}
	for _, p := range paths {
		privs := map[string]int{}
		for priv := range s.privileges(c.user, p) {
			privs[priv] = 1
		}
		out[p] = privs
	}
	return out, nil
}
