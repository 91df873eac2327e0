package proxmox

import (
	"regexp"
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/banlieue/banlieue/pkg/providersdk"
)

// uidLike and volumeIDLike match what Kubernetes UIDs and PVE volume IDs are made of.
var (
	uidLike      = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	volumeIDLike = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*:[A-Za-z0-9._/-]+$`)
)

// FuzzDescriptionRoundTrip checks that the machine UID and user-data snippet a VM's
// description records read back unchanged, whatever names Kubernetes accepts the
// machine under and whatever a person wrote into the description before banlieue's
// lines, as long as it does not forge them.
func FuzzDescriptionRoundTrip(f *testing.F) {
	f.Add("team-a", "web-1", "0b6f7c1e-2a1b-4c3d-9e8f-0a1b2c3d4e5f", "local:snippets/banlieue-0b6f.yaml", "")
	f.Add("a", strings.Repeat("b", 253), "uid", "", "notes\nmore notes")
	f.Add("ns", "web.1", "u", "cephfs:snippets/x.yaml", "banlieue.io/machine-uid:")
	f.Fuzz(func(t *testing.T, namespace, name, uid, snippet, preamble string) {
		if len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 ||
			!uidLike.MatchString(uid) || (snippet != "" && !volumeIDLike.MatchString(snippet)) ||
			strings.Contains(preamble, DescriptionUIDKey) || strings.Contains(preamble, descriptionUserData) {
			return // names the API server refuses, UIDs it never makes, volumes PVE never names, forged lines
		}
		m := &providersdk.Machine{Namespace: namespace, Name: name, UID: k8stypes.UID(uid)}
		desc := preamble + "\n" + description(m, snippet)
		if got := descriptionUID(desc); got != uid {
			t.Errorf("UID reads back as %q, want %q\n%s", got, uid, desc)
		}
		if got := descriptionValue(desc, descriptionUserData); got != snippet {
			t.Errorf("snippet reads back as %q, want %q\n%s", got, snippet, desc)
		}
		if n := machineVMName(namespace, name); len(n) > maxVMName || len(validation.IsDNS1123Label(n)) > 0 {
			t.Errorf("VM name %q of %s/%s is no DNS label of at most %d characters", n, namespace, name, maxVMName)
		}
	})
}
