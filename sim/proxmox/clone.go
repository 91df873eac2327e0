package proxmoxsim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// cloneDrive is one disk of a clone's plan.
type cloneDrive struct {
	key    string
	drive  propertyString
	source *storage
	volume *volume
	// full copies the disk; otherwise the clone's disk is a thin child of the base
	// volume. Cloud-init drives are always made afresh.
	full, cloudinit bool
}

// linkable reports whether a storage's plugin can make linked clones.
func (st *storage) linkable() bool {
	return st.fileBased() || slices.Contains([]string{"lvmthin", "zfspool", "rbd"}, st.Type)
}

// postClone copies a VM or template as qemu-server's clone_vm does. Its checks run
// before the worker is forked, failing the request, and again in the worker once it
// holds the source's config lock (shared, so parallel clones of a stopped template
// proceed; exclusive for a running source) and the new VMID's, each waited for a
// second. So two clients that ask for the same free VMID both get a UPID, and the one
// whose worker comes second fails: "can't lock file …lock-<newid>.conf' - got timeout"
// while the first clone runs, "unable to create VM <newid>: config file already
// exists" after it. The clone exists from the worker's start with only "lock: clone"
// in its config; when the qmclone task ends it gets its disks and full config, or on
// failure disappears.
func (s *Simulator) postClone(c *call) (any, error) {
	src, err := s.vmOf(c)
	if err != nil {
		return nil, err
	}
	newid, err := requiredVMID(c, "newid")
	if err != nil {
		return nil, err
	}
	target, storeID, pool := c.params["target"], c.params["storage"], c.params["pool"]
	if target == c.node || target == "localhost" {
		target = ""
	}
	full := src.conf["template"] != "1"
	if v, ok := c.params["full"]; ok {
		full, _ = parseBool(v)
	}
	var dest *storage
	// check is clone_vm's load_and_check.
	check := func() ([]cloneDrive, error) {
		if _, ok := s.pools[pool]; pool != "" && !ok {
			return nil, failf("pool '%s' does not exist", pool)
		}
		if target != "" && s.node(target) == nil {
			return nil, failf("no such cluster node '%s'", target)
		}
		if storeID != "" {
			if dest, err = (&disks{s: s, node: c.node}).imagesStorage(storeID, "storage"); err != nil {
				return nil, err
			}
			if target != "" {
				if _, err := s.storageOn(target, storeID); err != nil {
					return nil, err
				}
				if !dest.Shared {
					return nil, failf("can't clone to non-shared storage '%s'", storeID)
				}
			}
		}
		if err := s.checkQuorum(); err != nil {
			return nil, err
		}
		if lock := src.conf["lock"]; lock != "" {
			return nil, failf("VM is locked (%s)", lock)
		}
		if snap := c.params["snapname"]; snap != "" {
			return nil, failf("snapshot '%s' does not exist", snap)
		}
		if !full && storeID != "" {
			return nil, failf("parameter 'storage' not allowed for linked clones")
		}
		if !full && c.params["format"] != "" {
			return nil, failf("parameter 'format' not allowed for linked clones")
		}
		plan, shared, err := s.clonePlan(src, full)
		if err != nil {
			return nil, err
		}
		if target != "" && !shared {
			return nil, failf("can't clone VM to node '%s' (VM uses local storage)", target)
		}
		if s.vms[newid] != nil {
			return nil, failf("unable to create VM %d: config file already exists", newid)
		}
		return plan, nil
	}
	plan, err := check()
	if err != nil {
		return nil, err
	}
	lines := []string{fmt.Sprintf("create %s clone of VM %d with ID %d", map[bool]string{true: "full", false: "linked"}[full], src.vmid, newid)}
	for _, d := range plan {
		kind := map[bool]string{true: "full", false: "linked"}[d.full]
		lines = append(lines, fmt.Sprintf("create %s clone of drive %s (%s)", kind, d.key, d.drive.first))
	}
	params := maps.Clone(c.params)
	var dst *vm
	return s.fork(c, "qmclone", fmt.Sprint(src.vmid), worker{
		locks: []lockSpec{
			{vmid: src.vmid, shared: !src.running, timeout: s.cloneTimeout()},
			{vmid: newid, timeout: s.cloneTimeout()},
		},
		begin: func() error {
			if s.vms[src.vmid] != src {
				return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", c.node, src.vmid)
			}
			if plan, err = check(); err != nil {
				return err
			}
			dst = &vm{vmid: newid, node: c.node, conf: map[string]string{"lock": "clone"}}
			s.vms[newid] = dst
			return nil
		},
		finish: func(fail error) error {
			if fail == nil && s.vms[newid] != dst {
				fail = fmt.Errorf("unable to create VM %d: config file vanished", newid)
			}
			if fail != nil {
				if s.vms[newid] == dst {
					s.forget(newid)
				}
				return failf("clone failed: %s", errText(fail))
			}
			s.finishClone(src, dst, plan, dest, params)
			if target != "" {
				dst.node = target
			}
			dst.pool = pool
			return nil
		},
	}, lines...), nil
}

// clonePlan decides how each disk is cloned and whether every volume is on shared
// storage, failing where PVE's volume_has_feature says no.
func (s *Simulator) clonePlan(src *vm, full bool) ([]cloneDrive, bool, error) {
	var plan []cloneDrive
	shared := true
	for _, k := range slices.Sorted(maps.Keys(src.conf)) {
		if !driveKey.MatchString(k) {
			continue
		}
		p := parseProperty(src.conf[k], "file")
		cloudinit := strings.Contains(p.first, "cloudinit")
		st, vol := s.findVolume(src.node, p.first)
		if st != nil && !st.Shared {
			shared = false
		}
		if p.isCDROM() && !cloudinit {
			continue
		}
		if vol == nil {
			return nil, false, failf("volume '%s' does not exist", p.first)
		}
		d := cloneDrive{key: k, drive: p, source: st, volume: vol, full: full || cloudinit, cloudinit: cloudinit}
		isBase := strings.Contains(vol.name, "base-") && vol.parent == ""
		if !d.full && (!isBase || !st.linkable()) {
			return nil, false, failf("Linked clone feature is not supported for '%s' (%s)", p.first, k)
		}
		plan = append(plan, d)
	}
	return plan, shared, nil
}

// finishClone writes the clone's disks and config: everything the source has but
// snapshots, unused disks and the template flag, new MACs, a new SMBIOS UUID and
// generation ID, and the requested name ("Copy-of-VM-<name>" by default).
func (s *Simulator) finishClone(src, dst *vm, plan []cloneDrive, dest *storage, params map[string]string) {
	conf := map[string]string{}
	for k, val := range src.conf {
		switch {
		case slices.Contains([]string{"template", "lock", "parent", "snaptime", "vmstate", "snapstate", "runningcpu", "runningmachine"}, k),
			strings.HasPrefix(k, "unused"):
		case strings.HasPrefix(k, "net") && netMAC(val) != "":
			model, _, p := parseNet(val)
			p.first = model + "=" + randomMAC()
			conf[k] = p.String()
		default:
			conf[k] = val
		}
	}
	d := &disks{s: s, node: src.node, vmid: dst.vmid}
	for _, cd := range plan {
		st := cd.source
		if dest != nil && cd.full {
			st = dest
		}
		var vol *volume
		switch {
		case cd.cloudinit:
			vol = d.alloc(st, cloudinitName(st, dst.vmid), cd.volume.size)
		case cd.full:
			vol = d.newImage(st, cd.volume.size)
		default:
			vol = d.linked(st, cd.volume)
		}
		cd.drive.first = st.Name + ":" + vol.name
		if !cd.cloudinit {
			cd.drive.opts["size"] = formatSize(vol.size)
		}
		conf[cd.key] = cd.drive.String()
	}
	smbios := parseProperty(conf["smbios1"], "uuid")
	smbios.first = ""
	smbios.opts["uuid"] = newUUID()
	conf["smbios1"] = strings.TrimPrefix(smbios.String(), ",")
	if conf["vmgenid"] != "" {
		conf["vmgenid"] = newUUID()
	}
	conf["name"] = cmp.Or(params["name"], "Copy-of-VM-"+cmp.Or(src.conf["name"], fmt.Sprint(src.vmid)))
	if params["description"] != "" {
		conf["description"] = params["description"]
	}
	dst.conf = conf
}

// linked makes a thin child of a base volume, named as the storage's plugin names
// it: base-9000-disk-0/vm-101-disk-0.
func (d *disks) linked(st *storage, base *volume) *volume {
	for n := 0; ; n++ {
		name := base.name + "/" + imageName(st, "vm", d.vmid, n)
		if d.s.volumeOn(d.node, st, name) == nil && !d.s.hasDisk(d.node, st, d.vmid, n) {
			v := d.alloc(st, name, base.size)
			v.parent = base.name
			return v
		}
	}
}

// hasDisk reports whether a VM's n-th disk exists on st under any name.
func (s *Simulator) hasDisk(node string, st *storage, vmid, n int) bool {
	return s.images[storeKey(node, st)][imageName(st, "vm", vmid, n)] > 0
}
