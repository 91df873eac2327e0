package proxmoxsim

import (
	"context"
	"crypto/md5"  //nolint:gosec // PVE's checksum-algorithm parameter accepts md5
	"crypto/sha1" //nolint:gosec // PVE's checksum-algorithm parameter accepts sha1
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// What PVE accepts per content type uploaded or downloaded: snippets are not among
// them (WriteSnippet stands in for scp).
var (
	transferContents = []string{"iso", "vztmpl", "import"}
	transferExt      = map[string]*regexp.Regexp{
		"iso":    regexp.MustCompile(`(?i)[^/]+\.(?:iso|img)$`),
		"vztmpl": regexp.MustCompile(`[^/]+\.tar\.(?:gz|xz|zst|bz2)$`),
		"import": regexp.MustCompile(`[A-Za-z0-9_.+\-]+\.(ova|ovf|qcow2|raw|vmdk)$`),
	}
	unsafeFilename = regexp.MustCompile(`[^a-zA-Z0-9_.\-]`)
	checksums      = map[string]func() hash.Hash{
		"md5": md5.New, "sha1": sha1.New, "sha224": sha256.New224, "sha256": sha256.New, "sha384": sha512.New384, "sha512": sha512.New,
	}
)

// transfer is an upload or download as checked before its task starts.
type transfer struct {
	node              string
	st                *storage
	content, filename string
	checksum, algo    string
}

// checkTransfer applies the checks PVE's upload and download-url share.
func (s *Simulator) checkTransfer(c *call) (*transfer, error) {
	t := &transfer{node: c.node, content: c.params["content"], checksum: c.params["checksum"], algo: c.params["checksum-algorithm"]}
	for _, p := range []string{"content", "filename"} {
		if c.params[p] == "" {
			return nil, missing(p)
		}
	}
	if !slices.Contains(transferContents, t.content) {
		return nil, paramErrorf("content", "value '%s' does not have a value in the enumeration 'iso, vztmpl, import'", t.content)
	}
	if (t.checksum == "") != (t.algo == "") {
		return nil, paramErrorf(map[bool]string{true: "checksum", false: "checksum-algorithm"}[t.checksum == ""], "parameter is missing")
	}
	if _, ok := checksums[t.algo]; t.algo != "" && !ok {
		return nil, paramErrorf("checksum-algorithm", "value '%s' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'", t.algo)
	}
	st, err := s.storageOn(c.node, c.params["storage"])
	if err != nil {
		return nil, err
	}
	if !st.fileBased() {
		return nil, failf("can't upload to storage type '%s', not a file based storage!", st.Type)
	}
	if !st.has(t.content) {
		return nil, failf("storage '%s' is not configured for content-type '%s'", st.Name, t.content)
	}
	t.st, t.filename = st, unsafeFilename.ReplaceAllString(c.params["filename"], "_")
	if !transferExt[t.content].MatchString(t.filename) {
		msg := "wrong file extension"
		if t.content == "import" {
			msg = "invalid filename or wrong extension"
		}
		return nil, paramErrorf("filename", "%s", msg)
	}
	return t, nil
}

// verify checks data against the expected checksum, as PVE does before it keeps a
// file.
func (t *transfer) verify(data []byte) error {
	if t.algo == "" {
		return nil
	}
	h := checksums[t.algo]()
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(t.checksum) {
		return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, t.checksum)
	}
	return nil
}

// store keeps a transferred file as a volume: iso/…, vztmpl/… or import/….
func (s *Simulator) store(t *transfer, data []byte) {
	format := t.content
	if t.content == "import" {
		format = transferExt["import"].FindStringSubmatch(t.filename)[1]
	}
	s.putVolume(t.node, t.st, &volume{name: t.content + "/" + t.filename, content: t.content, format: format, size: uint64(len(data)), data: data})
}

// postUpload stores a multipart upload in an imgcopy task on the node serving the
// API, which copies it to the node the path names.
func (s *Simulator) postUpload(c *call) (any, error) {
	if c.upload == nil {
		return nil, failf("missing temporary file name")
	}
	if n := s.node(c.node); n != s.entry() && !n.online {
		return nil, failf("can't activate storage '%s' on node '%s': command 'ssh %s' failed: exit code 255", c.params["storage"], c.node, n.ip)
	}
	t, err := s.checkTransfer(c)
	if err != nil {
		return nil, err
	}
	data := c.upload.data
	return s.startTask(c, "imgcopy", "", func(fail error) error {
		if fail == nil {
			fail = t.verify(data)
		}
		if fail != nil {
			return fail
		}
		s.store(t, data)
		return nil
	}, "starting file import from: /var/tmp/pveupload-"+strings.ReplaceAll(newUUID(), "-", "")), nil
}

// downloadTimeout bounds a download-url fetch.
const downloadTimeout = 10 * time.Minute

// postDownloadURL fetches an http(s) URL into a storage in a download task,
// verifying the checksum when given one.
func (s *Simulator) postDownloadURL(c *call) (any, error) {
	src := c.params["url"]
	if src == "" {
		return nil, missing("url")
	}
	if !regexp.MustCompile(`^https?://.*`).MatchString(src) {
		return nil, paramErrorf("url", "value does not match the regex pattern")
	}
	t, err := s.checkTransfer(c)
	if err != nil {
		return nil, err
	}
	verifyTLS := c.params["verify-certificates"] != "0"
	var data []byte
	fetch := func() (err error) {
		data, err = download(s.ctx, src, verifyTLS)
		if err == nil {
			err = t.verify(data)
		}
		return err
	}
	return s.startWork(c, "download", encodeText(t.filename), fetch, func(fail error) error {
		if fail != nil {
			return fail
		}
		s.store(t, data)
		return nil
	}, "downloading "+src+" to "+t.st.path()+"/template/"+t.filename), nil
}

func download(ctx context.Context, src string, verifyTLS bool) ([]byte, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: !verifyTLS} //nolint:gosec // the API's verify-certificates=0
	client := &http.Client{Transport: tr, Timeout: downloadTimeout}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download failed: %s", resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	return data, nil
}

// encodeText is PVE::Tools::encode_text, which keeps a task ID free of colons and
// spaces.
func encodeText(s string) string {
	var b strings.Builder
	for _, r := range []byte(s) {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			b.WriteByte(r)
		} else {
			fmt.Fprintf(&b, "\\x%02x", r)
		}
	}
	return b.String()
}
