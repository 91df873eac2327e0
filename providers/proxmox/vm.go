package proxmox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"
	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Identity of a machine's VM.
const (
	// TagPrefix starts the tag that holds the machine's UID on its VM: banlieue-<uid>.
	TagPrefix = "banlieue-"
	// DescriptionUIDKey starts the description line that holds the machine's UID, set by
	// the clone itself, so the VM carries the UID from the moment its config is written.
	DescriptionUIDKey = "banlieue.io/machine-uid: "
	// descriptionUserData starts the description line naming the user-data snippet.
	descriptionUserData = "banlieue.io/user-data: "
	// maxVMName is the longest VM name: PVE names are DNS names, and one label is the
	// most a guest's host name can take.
	maxVMName = 63
)

// resource is a guest as /cluster/resources?type=vm lists it.
type resource struct {
	VMID int    `json:"vmid"`
	Node string `json:"node"`
	Name string `json:"name"`
	Type string `json:"type"`
	// Status is running or stopped; a VM read directly from its config has none, and
	// its power is read from status/current.
	Status   string `json:"status"`
	Tags     string `json:"tags"`
	Lock     string `json:"lock"`
	Template int    `json:"template"`
}

// vmState is what a lookup found of a VM: its resource entry and its config.
type vmState struct {
	resource
	conf config
}

// config is a VM's config, every value as a string, as the config file holds it.
type config map[string]string

// UnmarshalJSON reads PVE's typed config answer (integers for booleans and counts).
func (c *config) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := config{}
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case float64:
			out[k] = strconv.FormatFloat(v, 'f', -1, 64)
		case nil:
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	*c = out
	return nil
}

// guests lists every guest of the cluster in one call.
func (s *session) guests(ctx context.Context) ([]resource, error) {
	var all []resource
	if err := s.get(ctx, "/cluster/resources", map[string]string{"type": "vm"}, &all); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(r resource) bool { return r.Type != "" && r.Type != "qemu" }), nil
}

// listingReuse is how long a listing Observe read stays good for the machine's Create:
// the SDK calls Create right after Observe, in the same reconcile.
const listingReuse = 2 * time.Second

// listing is a guest listing and when it was read.
type listing struct {
	all []resource
	at  time.Time
}

// keepListing keeps the listing in which Observe did not find the machine's VM, for
// the Create of the same reconcile to take (takeListing) instead of listing a large
// cluster again. It is safe because controller-runtime never reconciles a machine
// twice at once: between the two calls no clone for this machine can start but one
// this process started, which the session tracks (s.clones), so the listing still
// tells whether the VM exists, and pendingClone still sees the clones of other
// processes in flight by its lock fields. Listings older than listingReuse are
// dropped whenever one is kept, so those of machines that never reach Create (deleted,
// a failed reconcile) do not pile up: the map holds the last listingReuse's at most.
func (s *session) keepListing(uid k8stypes.UID, all []resource) {
	now := s.driver.now()
	s.listingsMu.Lock()
	defer s.listingsMu.Unlock()
	maps.DeleteFunc(s.listings, func(_ k8stypes.UID, l listing) bool { return now.Sub(l.at) > listingReuse })
	s.listings[uid] = listing{all: all, at: now}
}

// takeListing removes and returns the listing kept for the machine, when it is at
// most listingReuse old.
func (s *session) takeListing(uid k8stypes.UID) ([]resource, bool) {
	s.listingsMu.Lock()
	defer s.listingsMu.Unlock()
	l, ok := s.listings[uid]
	delete(s.listings, uid)
	if !ok || s.driver.now().Sub(l.at) > listingReuse {
		return nil, false
	}
	return l.all, true
}

// othersCloning reports whether a guest of the listing is locked by a clone this
// session did not start (the ones it started and has not seen end are in s.clones).
func (s *session) othersCloning(all []resource) bool {
	s.clonesMu.Lock()
	defer s.clonesMu.Unlock()
	ours := make(map[location]bool, len(s.clones))
	for _, c := range s.clones {
		ours[c.loc] = true
	}
	for _, r := range all {
		if r.Lock == "clone" && !ours[location{node: r.Node, vmid: r.VMID}] {
			return true
		}
	}
	return false
}

// location is where a VM was last seen: its node and VMID.
type location struct {
	node string
	vmid int
}

func (l location) known() bool { return l.node != "" && l.vmid > 0 }

// findVM finds the machine's VM, confirmed by the UID in its description; nil when
// there is none. obs, when not nil, is what Observe reported in this reconcile.
func (s *session) findVM(ctx context.Context, m *providersdk.Machine, obs *providersdk.Observation) (*vmState, error) {
	vm, _, err := s.lookup(ctx, m, obs)
	return vm, err
}

// lookup finds the machine's VM. Where the machine knows its VM to be (see
// lastLocation), it reads that VM's config alone: one call, whatever the cluster's
// size. When that is not the machine's VM (none recorded, moved to another node, gone,
// another VM on the VMID), it lists the cluster's guests and looks there, as findIn
// does; the listing is returned then, and nil when the direct read sufficed. A VM not
// found is nil: the listing was read.
func (s *session) lookup(ctx context.Context, m *providersdk.Machine, obs *providersdk.Observation) (*vmState, []resource, error) {
	if loc := s.lastLocation(m, obs); loc.known() {
		vm, err := s.direct(ctx, m, loc)
		if err != nil || vm != nil {
			return vm, nil, err
		}
	}
	all, err := s.guests(ctx)
	if err != nil {
		return nil, nil, err
	}
	vm, err := s.findIn(ctx, all, m)
	if err != nil {
		return nil, nil, err
	}
	if vm == nil {
		s.forget(m.UID)
	}
	return vm, all, nil
}

// direct reads the config of the VM at loc and returns it when its description names
// the machine's UID. It returns nil, for the caller to list the cluster, when the VM
// is not there, is a template or is another machine's, or when its node does not
// answer (its VMs may have moved elsewhere). A VM with the machine's tag and another
// UID is an IdentityMismatch, as in findIn.
func (s *session) direct(ctx context.Context, m *providersdk.Machine, loc location) (*vmState, error) {
	conf, err := s.config(ctx, loc.node, loc.vmid)
	if err != nil {
		if ctx.Err() != nil || providersdk.IsUnauthorized(err) || providersdk.IsPermanent(err) ||
			(providersdk.IsUnreachable(err) && !errors.Is(err, proxmox.ErrNodeUnreachable)) {
			return nil, err // PVE itself is not there: the listing would fail alike
		}
		return nil, nil
	}
	if conf == nil || conf["template"] == "1" {
		return nil, nil
	}
	if descriptionUID(conf["description"]) != string(m.UID) {
		if tag := TagPrefix + string(m.UID); slices.Contains(splitTags(conf["tags"]), tag) {
			return nil, identityMismatch(loc.vmid, conf["name"], tag)
		}
		return nil, nil // the VMID went to another VM
	}
	vm := &vmState{conf: conf, resource: resource{
		VMID: loc.vmid, Node: loc.node, Name: conf["name"], Type: "qemu",
		Tags: conf["tags"], Lock: conf["lock"],
	}}
	s.remember(m.UID, loc)
	return vm, nil
}

// findIn finds the machine's VM on a guest list already read: a guest with its tag or
// its name, confirmed by the UID in its description. It returns nil when there is none.
func (s *session) findIn(ctx context.Context, all []resource, m *providersdk.Machine) (*vmState, error) {
	tag, name := TagPrefix+string(m.UID), vmName(m.Namespace, m.Name)
	for _, r := range all {
		if r.Template == 1 || (!slices.Contains(splitTags(r.Tags), tag) && r.Name != name) {
			continue
		}
		conf, err := s.config(ctx, r.Node, r.VMID)
		if err != nil {
			return nil, err
		}
		if conf == nil || descriptionUID(conf["description"]) != string(m.UID) {
			if slices.Contains(splitTags(r.Tags), tag) && conf != nil {
				return nil, identityMismatch(r.VMID, r.Name, tag)
			}
			continue // another VM with the name: PVE names need not be unique
		}
		s.remember(m.UID, location{node: r.Node, vmid: r.VMID})
		return &vmState{resource: r, conf: conf}, nil
	}
	return nil, nil
}

// identityMismatch is the error of a VM that carries the machine's tag but whose
// description names another UID.
func identityMismatch(vmid int, name, tag string) error {
	return providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
		"VM %d (%s) has this machine's tag %s but its description does not name the machine's UID; it is left alone", vmid, name, tag)
}

// lastLocation is where the machine's VM was last seen, best first: the Observation of
// this reconcile, where this session last found it, the machine's status.proxmox, or
// the VMID of its spec.providerID on the node it was placed on. The zero location
// when none is known.
func (s *session) lastLocation(m *providersdk.Machine, obs *providersdk.Observation) location {
	if obs != nil {
		if d, ok := obs.Details.(*infrav1.ProxmoxStatus); ok && d != nil {
			if loc := (location{node: d.Node, vmid: int(d.VMID)}); loc.known() {
				return loc
			}
		}
	}
	s.placesMu.Lock()
	loc, ok := s.places[m.UID]
	s.placesMu.Unlock()
	if ok {
		return loc
	}
	recorded := statusBlock(m)
	if loc := (location{node: recorded.Node, vmid: int(recorded.VMID)}); loc.known() {
		return loc
	}
	rest, ok := strings.CutPrefix(m.Spec.ProviderID, "proxmox://"+s.cluster+"/")
	if !ok {
		return location{}
	}
	vmid, err := strconv.Atoi(rest)
	if err != nil {
		return location{}
	}
	opts := &infrav1.ProxmoxOptions{}
	if m.Object != nil {
		_ = m.SpecField("proxmox", opts) // a bad block is reported by Create; here it is a hint
	}
	return location{node: first(recorded.Node, opts.Node, m.Spec.FailureDomain), vmid: vmid}
}

// statusBlock reads the machine's status.proxmox, the zero status when it has none or
// it cannot be read.
func statusBlock(m *providersdk.Machine) infrav1.ProxmoxStatus {
	var st infrav1.ProxmoxStatus
	if m.Object == nil || m.StatusField("proxmox", &st) != nil {
		return infrav1.ProxmoxStatus{}
	}
	return st
}

// remember records where the machine's VM was found, for the next lookups.
func (s *session) remember(uid k8stypes.UID, loc location) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	s.places[uid] = loc
}

// forget drops what the session knows of where the machine's VM is, once it is gone.
func (s *session) forget(uid k8stypes.UID) {
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	delete(s.places, uid)
}

// config reads a VM's config; nil when the VM is gone.
func (s *session) config(ctx context.Context, node string, vmid int) (config, error) {
	var conf config
	if err := s.get(ctx, vmPath(node, vmid, "config"), nil, &conf); err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return conf, nil
}

// splitTags splits PVE's tag list, which separates with ';' (or ',' and spaces).
func splitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// description is a new VM's description: who made it, the machine's UID and the
// user-data snippet, if any. PVE shows it in the VM's notes.
func description(m *providersdk.Machine, snippet string) string {
	d := fmt.Sprintf("Managed by banlieue: ProxmoxMachine %s/%s.\n%s%s\n", m.Namespace, m.Name, DescriptionUIDKey, m.UID)
	if snippet != "" {
		d += descriptionUserData + snippet + "\n"
	}
	return d
}

// descriptionValue reads the value of a line of a description that starts with key.
func descriptionValue(desc, key string) string {
	for _, line := range strings.Split(desc, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// descriptionUID reads the machine UID from a description.
func descriptionUID(desc string) string { return descriptionValue(desc, DescriptionUIDKey) }

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// vmName is the machine's VM name: "<namespace>-<name>" made a DNS label (lowercase,
// other characters replaced by '-', at most 63 characters with a hash of the whole
// name when cut), so that two machines never share a name.
func vmName(namespace, name string) string {
	full := namespace + "-" + name
	n := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(full), "-"), "-")
	if len(n) <= maxVMName && n == strings.ToLower(full) {
		return n
	}
	sum := sha256.Sum256([]byte(full))
	return strings.Trim(n[:min(len(n), maxVMName-9)], "-") + "-" + hex.EncodeToString(sum[:4])
}

// driveKeys are the config keys of a VM's disks in bus order, CD-ROMs (and cloud-init
// drives) excepted.
func (c config) diskKeys() []string {
	var out []string
	for _, bus := range []string{"scsi", "virtio", "sata", "ide"} {
		for i := range 31 {
			k := bus + strconv.Itoa(i)
			if v, ok := c[k]; ok && !isCDROM(v) {
				out = append(out, k)
			}
		}
	}
	return out
}

// nicKeys are the config keys of a VM's NICs in order: net0, net1 and so on.
func (c config) nicKeys() []string {
	var out []string
	for i := range 32 {
		if _, ok := c["net"+strconv.Itoa(i)]; ok {
			out = append(out, "net"+strconv.Itoa(i))
		}
	}
	return out
}

// isCDROM reports whether a drive is a CD-ROM or a cloud-init drive.
func isCDROM(drive string) bool {
	p := parseProperty(drive)
	return p.opts["media"] == "cdrom" || p.first == "none" || p.first == "cdrom" || strings.Contains(p.first, "cloudinit")
}

// property is a parsed PVE property string: a first value (a drive's volume, a NIC's
// model=MAC), then key=value options in their order.
type property struct {
	first string
	keys  []string
	opts  map[string]string
}

func parseProperty(s string) property {
	p := property{opts: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if i == 0 && (!ok || k == "file" || isNICModel(k)) {
			p.first = part
			if k == "file" {
				p.first = v
			}
			continue
		}
		if ok {
			p.set(k, v)
		}
	}
	return p
}

// set sets an option, keeping the options' order.
func (p *property) set(k, v string) {
	if _, ok := p.opts[k]; !ok {
		p.keys = append(p.keys, k)
	}
	p.opts[k] = v
}

// String prints the property string.
func (p property) String() string {
	parts := []string{p.first}
	for _, k := range p.keys {
		parts = append(parts, k+"="+p.opts[k])
	}
	return strings.Join(parts, ",")
}

// isNICModel reports whether k is a NIC model, which carries the MAC as its value.
func isNICModel(k string) bool {
	return slices.Contains([]string{"virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"}, k)
}

// diskGiB is a drive's size in GiB, rounded up; 0 when unknown.
func diskGiB(drive string) int64 {
	size := parseProperty(drive).opts["size"]
	if size == "" {
		return 0
	}
	unit := size[len(size)-1]
	n, err := strconv.ParseFloat(strings.TrimRight(size, "KMGT"), 64)
	if err != nil {
		return 0
	}
	shift := map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[unit]
	if shift == 0 {
		shift = 1
	}
	bytes := n * shift
	return int64((bytes + (1<<30 - 1)) / (1 << 30))
}

// storageOf is the storage of a drive's volume.
func storageOf(drive string) string {
	sid, _, _ := strings.Cut(parseProperty(drive).first, ":")
	return sid
}

// first returns the first non-empty string.
func first(s ...string) string { return cmp.Or(s...) }
