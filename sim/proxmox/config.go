package proxmoxsim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Parameters of config updates that are not config keys.
var updateParams = []string{"node", "vmid", "digest", "delete", "revert", "skiplock", "background_delay", "force"}

// getVMConfig is GET config: the config with its pending changes in, as the VM will
// be after its next power cycle, unless current=1 asks for the values it runs with.
func (s *Simulator) getVMConfig(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	current := false
	if val, ok := c.params["current"]; ok {
		if current, ok = parseBool(val); !ok {
			return nil, paramErrorf("current", "type check ('boolean') failed - got '%s'", val)
		}
	}
	if current {
		return configJSON(v.conf, v.digest()), nil
	}
	return configJSON(v.withPending(), v.digest()), nil
}

// configChange is a config update read from a request: keys to set, keys to delete
// and keys whose pending change to revert.
type configChange struct {
	set    map[string]string
	delete []string
	revert []string
}

// listPattern splits PVE's pve-configid-list: commas, semicolons, spaces or NULs.
var listPattern = regexp.MustCompile(`[,;\s\x00]+`)

func readConfigChange(c *call) (configChange, error) {
	ch := configChange{set: map[string]string{}}
	for k, val := range c.params {
		if !slices.Contains(updateParams, k) {
			ch.set[k] = val
		}
	}
	for _, k := range listPattern.Split(c.params["revert"], -1) {
		if k == "" {
			continue
		}
		if !configKey.MatchString(k) {
			return ch, paramErrorf("revert", "unknown option '%s'", k)
		}
		if _, ok := ch.set[k]; ok {
			// PVE names the wrong parameter, and quotes it so.
			return ch, paramErrorf("delete", "you can't use '-%s' and -revert %s' at the same time", k, k)
		}
		ch.revert = append(ch.revert, k)
	}
	for _, k := range listPattern.Split(c.params["delete"], -1) {
		if k == "" {
			continue
		}
		if _, ok := ch.set[k]; ok {
			return ch, paramErrorf("delete", "you can't use '-%s' and -delete %s' at the same time", k, k)
		}
		if slices.Contains(ch.revert, k) {
			return ch, paramErrorf("revert", "you can't use '-delete %s' and -revert %s' at the same time", k, k)
		}
		if !configKey.MatchString(k) {
			return ch, paramErrorf("delete", "unknown option '%s'", k)
		}
		ch.delete = append(ch.delete, k)
	}
	if len(ch.set) == 0 && len(ch.delete) == 0 && len(ch.revert) == 0 {
		return ch, failf("no options specified")
	}
	return ch, checkConfigParams(ch.set)
}

// putVMConfig is the synchronous config API: the change is made before it answers.
// As PVE's update_vm_api, it checks the digest and the config's lock first, then
// waits for the config lock (lock_config: LockTimeout) while a task holds it, failing
// with "got timeout" after it, and checks again once it has it.
func (s *Simulator) putVMConfig(c *call) (any, error) {
	v, ch, err := s.configRequest(c)
	if err != nil {
		return nil, err
	}
	if err := s.lockWait(v.vmid, false, s.configLockTimeout()); err != nil {
		return nil, err
	}
	defer s.unlock(v.vmid, false)
	if s.vms[v.vmid] != v {
		return nil, failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid)
	}
	return nil, s.applyConfig(c, v, ch)
}

// configRequest reads the VM and the change a config request names, and makes the
// checks PVE makes before it locks or forks: digest and lock.
func (s *Simulator) configRequest(c *call) (*vm, configChange, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, configChange{}, err
	}
	ch, err := readConfigChange(c)
	if err == nil {
		err = v.checkDigest(c)
	}
	if err == nil {
		err = v.checkLock(c)
	}
	return v, ch, err
}

// postVMConfig is the asynchronous config API: PVE checks the parameters, the digest
// and the lock, then makes the change in a qmconfig worker that holds the config lock,
// so a lock it waits for in vain fails the task.
func (s *Simulator) postVMConfig(c *call) (any, error) {
	v, ch, err := s.configRequest(c)
	if err != nil {
		return nil, err
	}
	return s.fork(c, "qmconfig", fmt.Sprint(v.vmid), worker{locks: s.configLock(v.vmid), finish: func(fail error) error {
		if fail != nil {
			return fail
		}
		if s.vms[v.vmid] != v {
			return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", v.node, v.vmid)
		}
		return s.applyConfig(c, v, ch)
	}}), nil
}

// applyConfig is PVE's update_vm_api worker, run with the config lock held: check
// digest and lock again, then write the change into the config's pending section (see
// pending.go) and apply it: all of it to a stopped VM, what hotplugs to a running
// one, the rest waiting for its next start or stop. A pending value that could not be
// hotplugged fails the request with 400 "Parameter verification failed." naming the
// key ("hotplug problem - …"), after the config is written, the value left pending.
func (s *Simulator) applyConfig(c *call, v *vm, ch configChange) error {
	if err := v.checkDigest(c); err != nil {
		return err
	}
	if err := v.checkLock(c); err != nil {
		return err
	}
	if err := s.checkWritable(v); err != nil {
		return err
	}
	p := v.pendingChange()
	// Reverting a key sets it back to the value the VM runs with, or drops it when the
	// VM has none.
	for _, k := range ch.revert {
		if cur, ok := p.conf[k]; ok {
			ch.set[k] = cur
		} else if _, ok := p.pending[k]; ok {
			ch.delete = append(ch.delete, k)
		}
	}
	modified := map[string]bool{}
	for _, k := range ch.delete {
		if err := s.pendDelete(p, k); err != nil {
			return err
		}
		modified[k] = true
	}
	d := &disks{s: s, node: v.node, vmid: v.vmid}
	for _, k := range slices.Sorted(maps.Keys(ch.set)) {
		modified[k] = true
		if cur, ok := p.pending[k]; ok && cur == ch.set[k] {
			continue // nothing changed
		}
		val, err := s.configValue(d, k, ch.set[k], "")
		if err != nil {
			d.rollback()
			return err
		}
		if old, ok := p.pending[k]; ok && driveKey.MatchString(k) {
			keepUnused(p.conf, old)
		}
		p.pending[k] = val
		p.undelete(k)
	}
	p.cleanup()
	errs := map[string]string{}
	if v.running {
		errs = s.hotplug(p, modified)
	} else {
		s.applyPending(p)
	}
	v.commit(p)
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// configValue checks and completes one key's value as PVE stores it.
func (s *Simulator) configValue(d *disks, k, val, defaultStorage string) (string, error) {
	switch {
	case driveKey.MatchString(k):
		return d.drive(k, val, defaultStorage)
	case strings.HasPrefix(k, "net"):
		return normalizeNet(k, val)
	case k == "tags":
		return normalizeTags(val)
	case k == "cicustom":
		for _, part := range strings.Split(val, ",") {
			_, volid, _ := strings.Cut(part, "=")
			if !strings.Contains(volid, ":") {
				return "", paramErrorf(k, "invalid format - unable to parse volume ID '%s'", volid)
			}
		}
	}
	return val, nil
}

// keepUnused keeps a detached disk's volume as the next free unusedN, as PVE does.
func keepUnused(conf map[string]string, drive string) {
	p := parseProperty(drive, "file")
	if p.isCDROM() || strings.Contains(p.first, "cloudinit") || !strings.Contains(p.first, ":") {
		return
	}
	for i := 0; ; i++ {
		if _, used := conf[fmt.Sprintf("unused%d", i)]; !used {
			conf[fmt.Sprintf("unused%d", i)] = p.first
			return
		}
	}
}

// postVM creates a VM: PVE writes a config holding only "lock: create" at once, then
// a qmcreate worker allocates the disks and writes the real config.
func (s *Simulator) postVM(c *call) (any, error) {
	vmid, err := requiredVMID(c, "vmid")
	if err != nil {
		return nil, err
	}
	if c.params["archive"] != "" {
		return nil, failf("unable to restore VM %d - restoring backups is not simulated", vmid)
	}
	want := map[string]string{}
	for k, v := range c.params {
		if !slices.Contains([]string{"node", "vmid", "pool", "storage", "start", "unique", "force", "bwlimit"}, k) {
			want[k] = v
		}
	}
	if err := checkConfigParams(want); err != nil {
		return nil, err
	}
	pool := c.params["pool"]
	if _, ok := s.pools[pool]; pool != "" && !ok {
		return nil, failf("pool '%s' does not exist", pool)
	}
	if err := s.checkQuorum(); err != nil {
		return nil, err
	}
	if other := s.vms[vmid]; other != nil {
		return nil, failf("unable to create VM %d - VM %d already exists on node '%s'", vmid, vmid, other.node)
	}
	v := &vm{vmid: vmid, node: c.node, conf: map[string]string{"lock": "create"}, pool: pool}
	s.vms[vmid] = v
	start, storage := c.params["start"] == "1", c.params["storage"]
	// The worker takes the config lock for a second, as create_vm's does.
	return s.fork(c, "qmcreate", fmt.Sprint(vmid), worker{locks: []lockSpec{{vmid: vmid, timeout: s.cloneTimeout()}}, finish: func(fail error) error {
		conf, err := s.newConfig(v, want, storage, fail)
		if err != nil {
			s.forget(vmid)
			return failf("unable to create VM %d - %s", vmid, errText(err))
		}
		v.conf = conf
		if start {
			s.powerOn(v)
		}
		return nil
	}}), nil
}

func (s *Simulator) newConfig(v *vm, want map[string]string, storage string, fail error) (map[string]string, error) {
	if fail != nil {
		return nil, fail
	}
	d := &disks{s: s, node: v.node, vmid: v.vmid}
	conf := map[string]string{
		"smbios1": "uuid=" + newUUID(), "vmgenid": newUUID(),
		"meta": fmt.Sprintf("creation-qemu=9.2.0,ctime=%d", time.Now().Unix()),
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		val, err := s.configValue(d, k, want[k], storage)
		if err != nil {
			d.rollback()
			return nil, err
		}
		conf[k] = val
	}
	if conf["boot"] == "" {
		conf["boot"] = defaultBootOrder(conf)
	}
	return conf, nil
}

// defaultBootOrder is PVE's default: disks, then CD-ROMs, then the first NIC.
func defaultBootOrder(conf map[string]string) string {
	var disks, cdroms []string
	for _, bus := range []string{"scsi", "virtio", "sata", "ide"} {
		for i := range 31 {
			k := fmt.Sprintf("%s%d", bus, i)
			if val, ok := conf[k]; ok {
				if parseProperty(val, "file").isCDROM() {
					cdroms = append(cdroms, k)
				} else {
					disks = append(disks, k)
				}
			}
		}
	}
	order := slices.Concat(disks, cdroms)
	if _, ok := conf["net0"]; ok {
		order = append(order, "net0")
	}
	return "order=" + strings.Join(order, ";")
}

// postTemplate turns a VM into a template in a qmtemplate task: its disks become
// base volumes, which linked clones can refer to.
func (s *Simulator) postTemplate(c *call) (any, error) {
	v, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	if v.running {
		return nil, failf("you can't convert a VM to template if VM is running")
	}
	if err := v.checkLock(c); err != nil {
		return nil, err
	}
	return s.fork(c, "qmtemplate", fmt.Sprint(v.vmid), worker{locks: s.configLock(v.vmid), finish: func(fail error) error {
		if fail == nil {
			fail = s.checkWritable(v)
		}
		if fail != nil {
			return fail
		}
		s.convertToTemplate(v)
		return nil
	}}), nil
}

func (s *Simulator) convertToTemplate(v *vm) {
	for k, val := range v.conf {
		if !driveKey.MatchString(k) {
			continue
		}
		p := parseProperty(val, "file")
		st, vol := s.findVolume(v.node, p.first)
		if vol == nil || p.isCDROM() || !strings.Contains(vol.name, "vm-") || strings.Contains(vol.name, "cloudinit") {
			continue
		}
		s.removeVolume(v.node, st, vol.name)
		vol.name = strings.Replace(vol.name, "vm-", "base-", 1)
		s.putVolume(v.node, st, vol)
		p.first = st.Name + ":" + vol.name
		v.conf[k] = p.String()
	}
	v.conf["template"] = "1"
}

// makeTemplate builds a cloud image template as an administrator prepares one: a
// 10 GiB disk on the node's first storage for images, a cloud-init drive, a virtio
// NIC on the first bridge, the guest agent on.
func (s *Simulator) makeTemplate(vmid int, name, nodeName string) error {
	n := s.node(nodeName)
	if n == nil {
		return fmt.Errorf("template %q is on node %q, which is not in the cluster", name, nodeName)
	}
	var st *storage
	for _, cand := range s.storages {
		if cand.has("images") && cand.availableOn(nodeName) {
			st = cand
			break
		}
	}
	if st == nil {
		return fmt.Errorf("node %q has no storage for VM images to hold template %q", nodeName, name)
	}
	v := &vm{vmid: vmid, node: nodeName}
	d := &disks{s: s, node: nodeName, vmid: vmid}
	disk := d.newImage(st, 10<<30)
	d.alloc(st, cloudinitName(st, vmid), 4<<20)
	v.conf = map[string]string{
		"name": name, "cores": "2", "sockets": "1", "memory": "2048", "ostype": "l26", "agent": "1",
		"scsihw": "virtio-scsi-single", "scsi0": fmt.Sprintf("%s:%s,iothread=1,size=10G", st.Name, disk.name),
		"ide2": st.Name + ":" + cloudinitName(st, vmid) + ",media=cdrom", "boot": "order=scsi0",
		"net0": "virtio=" + randomMAC() + ",bridge=" + firstOr(n.bridges, "vmbr0"), "serial0": "socket", "vga": "serial0",
		"ipconfig0": "ip=dhcp", "smbios1": "uuid=" + newUUID(), "vmgenid": newUUID(),
		"meta": fmt.Sprintf("creation-qemu=9.2.0,ctime=%d", time.Now().Unix()),
	}
	s.vms[vmid] = v
	s.convertToTemplate(v)
	return nil
}

func firstOr(list []string, def string) string {
	if len(list) > 0 {
		return list[0]
	}
	return def
}

var tagPattern = regexp.MustCompile(`^(?i)[a-z0-9_][a-z0-9_\-+.]*$`)

// normalizeTags stores tags as PVE does: split on ; , or space, empty ones dropped,
// duplicates dropped, each checked against the pve-tag format.
func normalizeTags(val string) (string, error) {
	var tags []string
	for _, t := range regexp.MustCompile(`[;,\s]+`).Split(val, -1) {
		if t == "" || slices.Contains(tags, t) {
			continue
		}
		if !tagPattern.MatchString(t) {
			return "", paramErrorf("tags", "invalid format - invalid characters in tag '%s'", t)
		}
		tags = append(tags, t)
	}
	return strings.Join(tags, ";"), nil
}
