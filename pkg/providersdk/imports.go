package providersdk

import (
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

// ImportRetry is how long a failed import is reported before it is tried again.
const ImportRetry = 5 * time.Minute

// Imports runs one session's image imports in the background, one per image at a time,
// for drivers that move an image's bytes themselves (a backend that downloads images on
// its own needs none). The imports belong to the session: Stop cancels them.
type Imports struct {
	now    func() time.Time
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	jobs map[types.UID]*ImportJob
	wg   sync.WaitGroup
}

// NewImports returns Imports reading the time from now and downloading with client; a
// nil client is one with the system's roots and proxy settings.
func NewImports(now func() time.Time, client *http.Client) *Imports {
	if client == nil {
		client = &http.Client{Transport: http.DefaultTransport}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Imports{now: now, client: client, ctx: ctx, cancel: cancel, jobs: map[types.UID]*ImportJob{}}
}

// Stop cancels the imports and waits for them.
func (im *Imports) Stop() {
	im.cancel()
	im.wg.Wait()
}

// Ensure returns image uid's import of what key describes (its source, checksum and
// target), starting run in the background, with ctx's logger, when there is none, and
// logging its start (from, without credentials), failure or end. A job for another key
// is cancelled and replaced; a failed one is started again once ImportRetry has passed.
// run returns the backend's reference to the imported image.
func (im *Imports) Ensure(ctx context.Context, uid types.UID, key, from string, run func(ctx context.Context, j *ImportJob) (string, error)) *ImportJob {
	im.mu.Lock()
	defer im.mu.Unlock()
	j := im.jobs[uid]
	if j != nil && j.key != key {
		j.cancel()
		j = nil
	}
	if j != nil {
		j.mu.Lock()
		retry := j.err != nil && im.now().Sub(j.finished) >= ImportRetry
		j.mu.Unlock()
		if retry {
			j = nil
		}
	}
	if j != nil {
		return j
	}
	// The job outlives the reconcile that started it, but keeps its logger.
	jctx, cancel := context.WithCancel(ctrl.LoggerInto(im.ctx, ctrl.LoggerFrom(ctx)))
	j = &ImportJob{key: key, cancel: cancel, client: im.client}
	im.jobs[uid] = j
	im.wg.Add(1)
	go func() {
		defer im.wg.Done()
		defer cancel()
		log := ctrl.LoggerFrom(jctx)
		log.Info("Importing image", "from", RedactURL(from))
		ref, err := run(jctx, j)
		if err != nil {
			log.Error(err, "Image import failed")
		} else {
			log.Info("Imported image", "ref", ref)
		}
		j.mu.Lock()
		j.finished, j.ref, j.err = im.now(), ref, err
		j.mu.Unlock()
	}()
	return j
}

// Forget drops the record of an image's finished import, once the image is found on the
// backend, so that an image deleted there later is imported again.
func (im *Imports) Forget(uid types.UID) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if j := im.jobs[uid]; j != nil {
		j.mu.Lock()
		done := !j.finished.IsZero()
		j.mu.Unlock()
		if done {
			delete(im.jobs, uid)
		}
	}
}

// ImportJob is one image's import.
type ImportJob struct {
	key    string
	cancel context.CancelFunc
	// client is the HTTP client Download uses: its Imports'.
	client *http.Client

	// done and total count the bytes moved and to move; total is 0 until known.
	done, total atomic.Int64

	mu       sync.Mutex
	finished time.Time
	ref      string
	err      error
}

// Expect adds n bytes to the work the job has to do.
func (j *ImportJob) Expect(n int64) { j.total.Add(n) }

// Track returns r, counting what is read through it as work done.
func (j *ImportJob) Track(r io.Reader) io.Reader { return &counter{r: r, n: &j.done} }

// Result reports the job as an image row: what is imported (e.g. `template "x"`) from
// where the URL says (without credentials) into where (e.g. "vCenter vc1").
func (j *ImportJob) Result(what, from, where string) ImageResult {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.finished.IsZero():
		pct := int64(0)
		if total := j.total.Load(); total > 0 {
			pct = min(99, j.done.Load()*100/total)
		}
		return ImageResult{InProgress: true, Reason: banlieuev1.ImageImportingReason,
			Message: fmt.Sprintf("importing %s from %s: %d%%", what, RedactURL(from), pct)}
	case j.err != nil:
		return ImageResult{Reason: banlieuev1.ImageImportFailedReason,
			Message: fmt.Sprintf("import of %s from %s into %s failed: %s", what, RedactURL(from), where, j.err.Error())}
	}
	return ImageResult{Ready: true, ResolvedRef: j.ref}
}

// Download GETs rawURL (http or https) with its Imports' HTTP client into w, checking checksum
// ("sha256:<hex>", "sha512:<hex>", or "" for none). Each byte counts weight times in
// the job's work (2 when the bytes are uploaded afterwards, say), done as it arrives.
// Its errors name the URL without credentials. It returns the bytes downloaded.
func (j *ImportJob) Download(ctx context.Context, rawURL, checksum string, w io.Writer, weight int64) (int64, error) {
	src := RedactURL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return 0, errors.New("the image URL is not an http or https URL")
	}
	var sum hash.Hash
	algo, want, _ := strings.Cut(checksum, ":")
	switch algo {
	case "":
	case "sha256":
		sum = sha256.New()
	case "sha512":
		sum = sha512.New()
	default:
		return 0, fmt.Errorf("checksum %q is neither sha256:<hex> nor sha512:<hex>", checksum)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %w", src, err)
	}
	res, err := j.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, RootCause(err))
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("failed to download %s: HTTP %s", src, res.Status)
	}
	if res.ContentLength > 0 {
		j.Expect(weight * res.ContentLength)
	}
	if sum != nil {
		w = io.MultiWriter(w, sum)
	}
	n, err := io.Copy(w, j.Track(res.Body))
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, RootCause(err))
	}
	if sum != nil {
		if got := hex.EncodeToString(sum.Sum(nil)); !strings.EqualFold(got, want) {
			return 0, fmt.Errorf("checksum mismatch: the download has %s:%s, the image source wants %s", algo, got, checksum)
		}
	}
	if res.ContentLength <= 0 {
		j.Expect(weight * n)
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

// RedactURL drops a URL's user information and query, which may hold credentials, so
// that it can be shown in a condition or a log.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the image URL"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
