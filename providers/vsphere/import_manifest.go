package vsphere

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha1" //nolint:gosec // SHA1 is an OVF manifest digest older tools write
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/banlieue/banlieue/providers/vsphere/vcenter"
)

// Bounds of the small files of an OVF package read into memory.
const (
	maxDescriptorBytes = 16 << 20
	maxManifestBytes   = 1 << 20
)

// manifestLine is one line of an OVF manifest (.mf): ALGO(file)= hex digest.
var manifestLine = regexp.MustCompile(`^(SHA1|SHA256|SHA512)\((.+)\)\s*=\s*([0-9A-Fa-f]+)$`)

// manifest is an OVF manifest: the digest of each file of the package, by file name.
type manifest struct {
	name    string
	digests map[string]fileDigest
}

// fileDigest is a file's digest: its algorithm as the manifest writes it and the hex.
type fileDigest struct{ algo, hex string }

// parseManifest reads the manifest called name. A line that is not a digest refuses it:
// a manifest that cannot be read whole verifies nothing.
func parseManifest(name string, data []byte) (*manifest, error) {
	m := &manifest{name: name, digests: map[string]fileDigest{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		g := manifestLine.FindStringSubmatch(line)
		if g == nil {
			return nil, fmt.Errorf("line %d of the manifest %s is not ALGO(file)= digest with ALGO SHA1, SHA256 or SHA512; fix the manifest", n, name)
		}
		m.digests[g[2]] = fileDigest{algo: g[1], hex: strings.ToLower(g[3])}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("failed to read the manifest %s: %w", name, err)
	}
	return m, nil
}

// digestOf is file's digest, or an error when the manifest has none.
func (m *manifest) digestOf(file, what string) (fileDigest, error) {
	d, ok := m.digests[file]
	if !ok {
		return d, fmt.Errorf("the manifest %s has no digest of %s %s; the import is refused, since every file of the package must be verified: add its digest to the manifest", m.name, what, file)
	}
	return d, nil
}

// newDigest is the hash of a manifest's algorithm.
func newDigest(algo string) hash.Hash {
	switch algo {
	case "SHA1":
		return sha1.New() //nolint:gosec // verifies what the manifest says, as it says it
	case "SHA512":
		return sha512.New()
	}
	return sha256.New()
}

// check reads r, file's content, and fails when it does not match d.
func (m *manifest) check(file string, d fileDigest, r io.Reader) error {
	h := newDigest(d.algo)
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("failed to read %s to verify it: %w", file, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.hex {
		return fmt.Errorf("%s does not match the manifest %s: its %s is %s, the manifest says %s; the package is damaged or was changed after its manifest was written",
			file, m.name, d.algo, got, d.hex)
	}
	return nil
}

// noManifest is the refusal of a package without a manifest when the image source asks
// for a checksum.
func noManifest(what string) error {
	return fmt.Errorf("%s has no manifest (.mf), and the image source asks for a checksum: without a manifest the files its OVF descriptor references cannot be verified; "+
		"import a package with its manifest (ovftool and govc export write one), or remove the checksum", what)
}

// checkHref refuses a file reference that could name something outside the package, or
// more than one file (govmomi matches names as patterns).
func checkHref(href string) error {
	if href == "" || strings.Contains(href, "..") || path.IsAbs(href) || strings.Contains(href, "://") || strings.ContainsAny(href, `*?[\`) {
		return fmt.Errorf("the OVF descriptor references %q, which is not a file name inside its package", href)
	}
	return nil
}

// ovfReferences reads the descriptor's file references and checks each.
func ovfReferences(descriptor []byte) ([]string, error) {
	hrefs, err := vcenter.OVFReferences(descriptor)
	if err != nil {
		return nil, err
	}
	for _, href := range hrefs {
		if err := checkHref(href); err != nil {
			return nil, err
		}
	}
	return hrefs, nil
}

// verifyOVF checks, against the manifest m (nil when the package has none), the OVF
// descriptor (a file under root) and the files it references, next to it; with no
// manifest, it refuses when checksumWanted, and allows the import otherwise.
func verifyOVF(root *os.Root, descriptor string, hrefs []string, m *manifest, checksumWanted bool) error {
	if m == nil {
		if checksumWanted {
			return noManifest("the OVF package " + descriptor)
		}
		return nil
	}
	dir := path.Dir(descriptor)
	files := append([]string{descriptor}, hrefs...)
	for i, file := range files {
		what, name := "the file", file
		if i == 0 {
			what, name = "the OVF descriptor", path.Base(file)
		}
		d, err := m.digestOf(name, what)
		if err != nil {
			return err
		}
		local := file
		if i > 0 {
			local = path.Join(dir, file)
		}
		f, err := root.Open(local)
		if err != nil {
			return fmt.Errorf("failed to open %s to verify it: %w", file, err)
		}
		err = m.check(name, d, f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// verifyOVA checks the OVA at file as verifyOVF checks an OVF package: the descriptor
// (the first *.ovf, the one the import reads) and every file it references against the
// manifest (the descriptor's name with .mf, else the first *.mf). Entries are known by
// their base name, as the import knows them; two entries of one name refuse the OVA,
// since which one is imported could not be told.
func verifyOVA(file string, checksumWanted bool) error {
	var (
		descriptor, mfName string
		descData, mfData   []byte
		mfs                = map[string][]byte{}
		seen               = map[string]bool{}
	)
	err := eachEntry(file, func(name string, r io.Reader) error {
		if seen[name] {
			return fmt.Errorf("the OVA holds two files named %s; the import is refused, as it could not tell which of them is imported", name)
		}
		seen[name] = true
		switch {
		case descriptor == "" && strings.HasSuffix(name, ".ovf"):
			data, err := readBounded(r, name, maxDescriptorBytes)
			descriptor, descData = name, data
			return err
		case strings.HasSuffix(name, ".mf"):
			data, err := readBounded(r, name, maxManifestBytes)
			if mfName == "" {
				mfName, mfData = name, data
			}
			mfs[name] = data
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if descriptor == "" {
		return errors.New("the OVA holds no OVF descriptor (.ovf); import an OVA made by ovftool, govc export or a hypervisor's export")
	}
	hrefs, err := ovfReferences(descData)
	if err != nil {
		return err
	}
	if own := strings.TrimSuffix(descriptor, ".ovf") + ".mf"; mfs[own] != nil {
		mfName, mfData = own, mfs[own]
	}
	if mfName == "" {
		if checksumWanted {
			return noManifest("the OVA")
		}
		return nil
	}
	m, err := parseManifest(mfName, mfData)
	if err != nil {
		return err
	}
	want := map[string]fileDigest{}
	for i, name := range append([]string{descriptor}, hrefs...) {
		what := "the file"
		if i == 0 {
			what = "the OVF descriptor"
		}
		if want[name], err = m.digestOf(name, what); err != nil {
			return err
		}
		if !seen[name] {
			return fmt.Errorf("the OVA has no file %s, which its OVF descriptor references", name)
		}
	}
	return eachEntry(file, func(name string, r io.Reader) error {
		if d, ok := want[name]; ok {
			return m.check(name, d, r)
		}
		return nil
	})
}

// eachEntry calls fn with the base name and content of each entry of the tar at file,
// in order; a link or directory has no content. Every kind counts, because the import
// opens the first entry of a name, whatever its kind.
func eachEntry(file string, fn func(name string, r io.Reader) error) error {
	f, err := os.Open(file) //nolint:gosec // the import's own temporary file
	if err != nil {
		return fmt.Errorf("failed to open the downloaded OVA: %w", err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("the download is not an OVA (a tar archive): %w", err)
		}
		if err := fn(path.Base(h.Name), tr); err != nil {
			return err
		}
	}
}

// readBounded reads r, the file name, refusing more than limit bytes.
func readBounded(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d MiB, more than an OVF package's descriptor or manifest needs", name, limit>>20)
	}
	return data, nil
}
