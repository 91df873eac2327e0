package proxmox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/pkg/redact"
)

// Description lines of a template imported for a VMImage.
const (
	// DescriptionImageUIDKey starts the description line that holds the VMImage's UID
	// on the template imported for it: the template's identity.
	DescriptionImageUIDKey = "banlieue.io/image-uid: "
	// descriptionImageFile starts the line naming the downloaded file, whose name
	// carries the checksum, so a template of an older checksum is not taken for the
	// current one.
	descriptionImageFile = "banlieue.io/image-file: "
)

// importPlan is what an image's import makes. Everything is derived from the image,
// so every session, before and after a provider restart, looks for the same file,
// task and template.
type importPlan struct {
	uid   k8stypes.UID
	image string
	url   string
	// algo and sum are download-url's checksum-algorithm and checksum; empty without
	// a checksum.
	algo, sum string
	// file is the file in the import storage, banlieue-<image>-<key>.<ext>, which is
	// also the download task's ID.
	file string
	// name is the template's name.
	name string
}

var (
	// unsafeFile matches what PVE's import file names may not hold.
	unsafeFile = regexp.MustCompile(`[^A-Za-z0-9_.\-]+`)
	// checksumPattern is the VMImage API's checksum format.
	checksumPattern = regexp.MustCompile(`^(sha256|sha512):([a-fA-F0-9]+)$`)
)

// newImportPlan plans the import of img as a template named name ("" for a name
// derived from the image). It fails, with a message for the image's status, when the
// source cannot be imported.
func newImportPlan(img *providersdk.Image, name string) (importPlan, error) {
	p := importPlan{uid: img.UID, image: img.Name, url: img.Source.ImportFrom}
	u, err := url.Parse(p.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return p, fmt.Errorf("the image source's importFrom %q is not an http or https URL", redact.URL(p.url))
	}
	ext := strings.ToLower(strings.TrimPrefix(path.Ext(u.Path), "."))
	switch ext {
	case "qcow2", "raw", "vmdk":
	case "img", "":
		ext = "qcow2" // cloud images named .img (Ubuntu's) are qcow2
	default:
		return p, fmt.Errorf("%s is not a qcow2, raw or vmdk disk image, the formats Proxmox VE imports", redact.URL(p.url))
	}
	key := sha256.Sum256([]byte(p.url))
	keyHex := hex.EncodeToString(key[:])
	if c := img.Source.Checksum; c != "" {
		m := checksumPattern.FindStringSubmatch(c)
		if m == nil {
			return p, fmt.Errorf("checksum %q is neither sha256:<hex> nor sha512:<hex>", c)
		}
		p.algo, p.sum, keyHex = m[1], strings.ToLower(m[2]), strings.ToLower(m[2])
	}
	p.file = TagPrefix + strings.Trim(unsafeFile.ReplaceAllString(img.Name, "-"), "-") + "-" + keyHex[:12] + "." + ext
	p.name = name
	if _, err := strconv.Atoi(name); name == "" || err == nil {
		// A derived name carries the key too: a new checksum makes a new template.
		p.name = vmName(TagPrefix+img.Name, keyHex[:8])
	}
	return p, nil
}

// volid is the downloaded file's volume ID on storage.
func (p importPlan) volid(storage string) string { return storage + ":import/" + p.file }

// description is the imported template's description: where it came from and its
// identity.
func (p importPlan) description() string {
	return fmt.Sprintf("Imported by banlieue for VMImage %s from %s.\n%s%s\n%s%s\n",
		p.image, redact.URL(p.url), DescriptionImageUIDKey, p.uid, descriptionImageFile, p.file)
}

// importTarget is where an import goes: the node and the storage the file is
// downloaded to.
type importTarget struct {
	node, storage string
}

// target picks the node and the import storage: the first online node of the node
// parameter (any online node, by name, without one), and the imageStorage parameter
// or else the node's first storage with the import content type.
func (s *session) target(ctx context.Context) (importTarget, error) {
	nodes, err := s.api.Nodes(ctx)
	if err != nil {
		return importTarget{}, err
	}
	var online []string
	for _, n := range nodes {
		if n.Online {
			online = append(online, n.Name)
		}
	}
	slices.Sort(online)
	var t importTarget
	candidates := s.nodes
	if len(candidates) == 0 {
		candidates = online
	}
	if i := slices.IndexFunc(candidates, func(n string) bool { return slices.Contains(online, n) }); i >= 0 {
		t.node = candidates[i]
	}
	if t.node == "" {
		return t, fmt.Errorf("none of the nodes %s that images may be imported into is online", strings.Join(candidates, ", "))
	}
	if t.storage, err = s.pickStorage(ctx, t.node, "import", s.imageStorage, false); err == nil && t.storage == "" {
		err = fmt.Errorf("node %s has no storage for imports; add 'import' to a file-based storage's content, or set the Provider's %s parameter",
			t.node, ParamImageStorage)
	}
	return t, err
}

// templateDisk picks the storage of an imported template's disk: the templateStorage
// parameter, else the node's first shared storage for VM images (from which clones
// can go to any node), else its first one.
func (s *session) templateDisk(ctx context.Context, node string) (string, error) {
	storage, err := s.pickStorage(ctx, node, "images", s.templateStorage, true)
	if err == nil && storage == "" {
		err = fmt.Errorf("node %s has no storage for VM images to hold the template's disk; set the Provider's %s parameter",
			node, ParamTemplateStorage)
	}
	return storage, err
}
