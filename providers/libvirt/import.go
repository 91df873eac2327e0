package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"libvirt.org/go/libvirtxml"
	ctrl "sigs.k8s.io/controller-runtime"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// importRetry is how long a failed import is reported before it is tried again.
const importRetry = 5 * time.Minute

// importer runs the session's image imports in the background, one per image at a
// time. The imports belong to the session: Disconnect cancels them.
type importer struct {
	s      *session
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	jobs map[k8stypes.UID]*importJob
	wg   sync.WaitGroup
}

// importJob is one image's import: download (checking the checksum) to a temporary
// file, upload into "<volume>.part" through libvirt's stream, copy that to the volume
// and delete it, so the volume only ever exists complete.
type importJob struct {
	target         volumeRef
	from, checksum string
	cancel         context.CancelFunc

	// done and total count downloaded plus uploaded bytes; total is 0 until known.
	done, total atomic.Int64

	mu       sync.Mutex
	finished time.Time
	err      error
}

func newImporter(s *session) *importer {
	ctx, cancel := context.WithCancel(context.Background())
	return &importer{s: s, ctx: ctx, cancel: cancel, jobs: map[k8stypes.UID]*importJob{}}
}

// stop cancels the imports and waits for them.
func (im *importer) stop() {
	im.cancel()
	im.wg.Wait()
}

// ensure starts the import of an image unless one runs, and reports it. A failed import
// is reported for importRetry, then tried again; a changed source restarts it.
func (im *importer) ensure(ctx context.Context, img *providersdk.Image, target volumeRef, from string) providersdk.ImageResult {
	log := ctrl.LoggerFrom(ctx).WithValues("volume", target.String())
	im.mu.Lock()
	defer im.mu.Unlock()
	j := im.jobs[img.UID]
	if j != nil && (j.target != target || j.from != from || j.checksum != img.Source.Checksum) {
		j.cancel()
		j = nil
	}
	if j != nil {
		if at := j.finishedAt(); !at.IsZero() && j.failed() && im.s.driver.now().Sub(at) >= importRetry {
			j = nil
		}
	}
	if j == nil {
		ctx, cancel := context.WithCancel(ctrl.LoggerInto(im.ctx, log))
		j = &importJob{target: target, from: from, checksum: img.Source.Checksum, cancel: cancel}
		im.jobs[img.UID] = j
		log.Info("Importing image", "from", redact(from))
		im.wg.Add(1)
		go func() {
			defer im.wg.Done()
			defer cancel()
			err := im.run(ctx, j)
			j.mu.Lock()
			j.finished, j.err = im.s.driver.now(), err
			j.mu.Unlock()
			if err != nil {
				log.Error(err, "Image import failed")
			} else {
				log.Info("Imported image")
			}
		}()
	}
	return j.result(im.s.ep.safe)
}

// forget drops the record of an image's finished import once its volume is found, so
// that a volume deleted later is imported again.
func (im *importer) forget(uid k8stypes.UID) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if j := im.jobs[uid]; j != nil && !j.finishedAt().IsZero() {
		delete(im.jobs, uid)
	}
}

func (j *importJob) finishedAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}

func (j *importJob) failed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err != nil
}

// result reports the job as a perProvider row.
func (j *importJob) result(host string) providersdk.ImageResult {
	j.mu.Lock()
	defer j.mu.Unlock()
	src := redact(j.from)
	switch {
	case j.finished.IsZero():
		pct := int64(0)
		if total := j.total.Load(); total > 0 {
			pct = min(99, j.done.Load()*100/total)
		}
		return providersdk.ImageResult{
			InProgress: true,
			Reason:     banlieuev1.ImageImportingReason,
			Message:    fmt.Sprintf("importing volume %s from %s: %d%%", j.target, src, pct),
		}
	case j.err != nil:
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageImportFailedReason,
			Message: fmt.Sprintf("import of volume %s from %s into libvirt at %s failed: %s", j.target, src, host, j.err.Error()),
		}
	}
	return providersdk.ImageResult{Ready: true, ResolvedRef: j.target.String()}
}

// run downloads the image and uploads it, on a connection of its own so that a long
// upload neither waits for nor holds up the session's calls.
func (im *importer) run(ctx context.Context, j *importJob) error {
	f, err := os.CreateTemp("", "banlieue-image-")
	if err != nil {
		return fmt.Errorf("failed to make a temporary file: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()); _ = f.Close() }()
	size, err := im.download(ctx, j, f)
	if err != nil {
		return err
	}
	head := make([]byte, 4)
	_, _ = f.ReadAt(head, 0)
	format := "raw"
	if bytes.Equal(head, []byte{'Q', 'F', 'I', 0xfb}) {
		format = "qcow2"
	}
	l, err := im.s.dial()
	if err != nil {
		return err
	}
	defer im.s.close(l)
	stop := context.AfterFunc(ctx, func() { im.s.close(l) })
	defer stop()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return im.upload(l, j, &counter{r: f, n: &j.done}, size, format)
}

// upload streams the image into "<volume>.part", then copies that to the volume.
func (im *importer) upload(l *libvirt.Libvirt, j *importJob, r io.Reader, size int64, format string) error {
	pool, err := l.StoragePoolLookupByName(j.target.pool)
	if err != nil {
		return im.s.fail("find storage pool "+j.target.pool, err)
	}
	part := j.target.name + ".part"
	if old, err := l.StorageVolLookupByName(pool, part); err == nil {
		_ = l.StorageVolDelete(old, 0)
	}
	spec := &libvirtxml.StorageVolume{
		Name:     part,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(size)},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	x, err := spec.Marshal()
	if err != nil {
		return err
	}
	vol, err := l.StorageVolCreateXML(pool, x, 0)
	if err != nil {
		return im.s.fail("create volume "+j.target.pool+"/"+part, err)
	}
	defer func() { _ = l.StorageVolDelete(vol, 0) }()
	if err := l.StorageVolUpload(vol, r, 0, uint64(size), 0); err != nil {
		return im.s.fail("upload the image", err)
	}
	// The upload replaced the file; its capacity is now the image's virtual size.
	if x, err = l.StorageVolGetXMLDesc(vol, 0); err != nil {
		return im.s.fail("read volume "+part, err)
	}
	uploaded := &libvirtxml.StorageVolume{}
	if err := uploaded.Unmarshal(x); err != nil || uploaded.Capacity == nil {
		return fmt.Errorf("failed to read the uploaded volume's size")
	}
	spec.Name, spec.Capacity = j.target.name, uploaded.Capacity
	if x, err = spec.Marshal(); err != nil {
		return err
	}
	if _, err := l.StorageVolCreateXMLFrom(pool, x, vol, 0); err != nil {
		return im.s.fail("copy the image to volume "+j.target.String(), err)
	}
	return nil
}

// download fetches j.from into f, checking its digest when the source has one, and
// returns its size.
func (im *importer) download(ctx context.Context, j *importJob, f *os.File) (int64, error) {
	src := redact(j.from)
	u, err := url.Parse(j.from)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return 0, errors.New("the image URL is not an http or https URL")
	}
	var sum hash.Hash
	algo, want, _ := strings.Cut(j.checksum, ":")
	switch algo {
	case "":
	case "sha256":
		sum = sha256.New()
	case "sha512":
		sum = sha512.New()
	default:
		return 0, fmt.Errorf("checksum %q is neither sha256:<hex> nor sha512:<hex>", j.checksum)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %w", src, err)
	}
	res, err := im.s.driver.httpClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, providersdk.RootCause(err))
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("failed to download %s: HTTP %s", src, res.Status)
	}
	if res.ContentLength > 0 {
		// Downloading and uploading each count for half of the progress.
		j.total.Add(2 * res.ContentLength)
	}
	w := io.Writer(f)
	if sum != nil {
		w = io.MultiWriter(f, sum)
	}
	n, err := io.Copy(w, &counter{r: res.Body, n: &j.done})
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, providersdk.RootCause(err))
	}
	if sum != nil {
		if got := hex.EncodeToString(sum.Sum(nil)); !strings.EqualFold(got, want) {
			return 0, fmt.Errorf("checksum mismatch: the download has %s:%s, the image source wants %s", algo, got, j.checksum)
		}
	}
	if res.ContentLength <= 0 {
		j.total.Add(2 * n)
	}
	return n, nil
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// redact drops a URL's user information and query, which may hold credentials.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the image URL"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
