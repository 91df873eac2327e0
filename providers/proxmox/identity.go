package proxmox

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// Identity of a machine's VM.
const (
	// TagPrefix starts the tag that holds the machine's UID on its VM: banlieue-<uid>.
	TagPrefix = "banlieue-"
	// ClusterTagPrefix starts the tag that names the cluster of the machine that marked
	// the VM (providersdk.Machine.ClusterID): banlieue.cluster-<uid>, read with the tags
	// in the one listing the orphan scan makes.
	ClusterTagPrefix = "banlieue.cluster-"
	// AdoptedTag marks a VM a machine adopted rather than created: it was its owner's
	// before, and is never deleted as an orphan.
	AdoptedTag = "banlieue.adopted"
	// DescriptionUIDKey starts the description line that holds the machine's UID, set by
	// the clone itself, so the VM carries the UID from the moment its config is written.
	DescriptionUIDKey = "banlieue.io/machine-uid: "
	// descriptionUserData starts the description line naming the user-data snippet.
	descriptionUserData = "banlieue.io/user-data: "
	// maxVMName is the longest VM name: PVE names are DNS names, and one label is the
	// most a guest's host name can take.
	maxVMName = 63
)

// description is a new VM's description: who made it, the machine's UID and the
// user-data snippet, if any. PVE shows it in the VM's notes.
func description(m *providersdk.Machine, snippet string) string {
	d := fmt.Sprintf("%sProxmoxMachine %s/%s.\n%s%s\n", descriptionManaged, m.Namespace, m.Name, DescriptionUIDKey, m.UID)
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

// descriptionManaged starts the first line of a new VM's description (see description).
const descriptionManaged = "Managed by banlieue: "

// withoutOwnLines is desc without the lines banlieue wrote (description): the user's
// own notes, as they were, in order.
func withoutOwnLines(desc string) string {
	var keep []string
	for _, line := range strings.Split(desc, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, descriptionManaged) || strings.HasPrefix(t, DescriptionUIDKey) || strings.HasPrefix(t, descriptionUserData) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// descriptionUID reads the machine UID from a description.
func descriptionUID(desc string) string { return descriptionValue(desc, DescriptionUIDKey) }

// identityMismatch is the error of a VM that carries the machine's tag but whose
// description names another UID.
func identityMismatch(vmid int, name, tag string) error {
	return providersdk.Permanent(infrav1.MachineIdentityMismatchReason,
		"VM %d (%s) has this machine's tag %s but its description does not name the machine's UID; it is left alone", vmid, name, tag)
}

// machineVMNames are the names given to machines' VMs. PVE takes a DNS name, but its
// cloud-init makes the guest's host name from the name's first label, so
// "<namespace>.<name>" would name every guest of a namespace after it: a DNS label it is.
var machineVMNames = providersdk.NameRules{MaxLen: maxVMName, DNSLabel: true}

// machineVMName is the machine's VM name, "<namespace>-<name>-<hash>"
// (providersdk.BackendName): the hash of namespace and name, always there, keeps the
// machines of two namespaces apart where the dashes alone would not ("tenant-a"/"b-web"
// and "tenant-a-b"/"web"). Lookups go by tag and description, so a VM named by an
// older scheme is still found.
func machineVMName(namespace, name string) string {
	return providersdk.BackendName(namespace, name, machineVMNames)
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// vmName is "<a>-<b>" made a DNS label (lowercase, other characters replaced by '-', at
// most 63 characters with a hash of the whole when it had to change). Imported
// templates are named so ("banlieue-<image>-<key>") and found again by that name, so
// it stays as it is; machines' VMs are named by machineVMName.
func vmName(a, b string) string {
	full := a + "-" + b
	n := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(full), "-"), "-")
	if len(n) <= maxVMName && n == strings.ToLower(full) {
		return n
	}
	sum := sha256.Sum256([]byte(full))
	return strings.Trim(n[:min(len(n), maxVMName-9)], "-") + "-" + hex.EncodeToString(sum[:4])
}

// first returns the first non-empty string.
func first(s ...string) string { return cmp.Or(s...) }

// markTags returns tags with the machine's marks added: its tag, and the tag of its
// cluster when it names one and tags name none.
func markTags(tags []string, m *providersdk.Machine) []string {
	out := slices.Clone(tags)
	if tag := TagPrefix + string(m.UID); !slices.Contains(out, tag) {
		out = append(out, tag)
	}
	if m.ClusterID != "" && clusterOf(out) == "" {
		out = append(out, ClusterTagPrefix+m.ClusterID)
	}
	return out
}

// unmarkTags returns tags without the machine's tag, any cluster tag and AdoptedTag.
func unmarkTags(tags []string, m *providersdk.Machine) []string {
	return slices.DeleteFunc(slices.Clone(tags), func(t string) bool {
		return t == TagPrefix+string(m.UID) || strings.HasPrefix(t, ClusterTagPrefix) || t == AdoptedTag
	})
}

// clusterOf is the cluster a VM's tags name (ClusterTagPrefix); "" when none does.
func clusterOf(tags []string) string {
	for _, t := range tags {
		if id, ok := strings.CutPrefix(t, ClusterTagPrefix); ok {
			return id
		}
	}
	return ""
}
