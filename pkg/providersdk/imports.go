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
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/redact"
)

// ImportRetry is how long a failed import is reported before it is tried again.
const ImportRetry = 5 * time.Minute

// Imports runs one session's image imports in the background, one per image at a time,
// for drivers that move an image's bytes themselves (a backend that downloads images on
// its own needs none; it can still check sources with ImportLimits.CheckSource). The
// imports belong to the session: Stop cancels them. Every import is bounded by the
// Provider's ImportLimits: its total time (Ensure) and, for what Download fetches, its
// size, idle time, redirects and the addresses it may connect to.
type Imports struct {
	now    func() time.Time
	limits ImportLimits
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	jobs map[types.UID]*ImportJob
	wg   sync.WaitGroup
}

// NewImports returns Imports reading the time from now and bounded by limits, which a
// driver reads from its Provider's parameters with ImportLimitsFrom when it opens the
// session (a session is replaced when the Provider's spec changes). Downloads use an HTTP
// client with the system's roots and proxy settings and the limits' dial guard. With
// invalid limits (limits.Err) every import fails with the error naming the parameter.
func NewImports(now func() time.Time, limits ImportLimits) *Imports {
	ctx, cancel := context.WithCancel(context.Background())
	return &Imports{now: now, limits: limits, client: newImportClient(limits, nil), ctx: ctx, cancel: cancel, jobs: map[types.UID]*ImportJob{}}
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
// run returns the backend's reference to the imported image. Its context ends after
// the limits' Timeout; the job then fails saying so, whatever run returned.
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
	timeout := im.limits.timeout()
	jctx, cancel := context.WithTimeoutCause(ctrl.LoggerInto(im.ctx, ctrl.LoggerFrom(ctx)), timeout, &limitError{
		fmt.Sprintf("the import took longer than the Provider's %s of %s; raise parameters.%s or import from a faster server", ParamImportTimeout, timeout, ParamImportTimeout)})
	j = &ImportJob{key: key, cancel: cancel, client: im.client, limits: im.limits}
	im.jobs[uid] = j
	im.wg.Add(1)
	go func() {
		defer im.wg.Done()
		defer cancel()
		log := ctrl.LoggerFrom(jctx)
		log.Info("Importing image", "from", redact.URL(from))
		ref, err := "", im.limits.Err()
		if err == nil {
			ref, err = run(jctx, j)
		}
		var le *limitError
		if err != nil && errors.As(context.Cause(jctx), &le) {
			err = le
		}
		if err != nil {
			// Backend and library errors may quote URLs with their tokens.
			err = errors.New(redact.Text(err.Error()))
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
	// client is the HTTP client Download uses and limits bound it: its Imports'.
	client *http.Client
	limits ImportLimits

	// done and total count the bytes moved and to move; total is 0 until known.
	done, total atomic.Int64
	// downloaded counts the bytes Download fetched, against limits.MaxSize.
	downloaded atomic.Int64

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
			Message: fmt.Sprintf("importing %s from %s: %d%%", what, redact.URL(from), pct)}
	case j.err != nil:
		return ImageResult{Reason: banlieuev1.ImageImportFailedReason,
			Message: fmt.Sprintf("import of %s from %s into %s failed: %s", what, redact.URL(from), where, redact.Text(j.err.Error()))}
	}
	return ImageResult{Ready: true, ResolvedRef: j.ref}
}

// Download GETs rawURL (http or https) with its Imports' HTTP client into w, checking checksum
// ("sha256:<hex>", "sha512:<hex>", or "" for none). Each byte counts weight times in
// the job's work (2 when the bytes are uploaded afterwards, say), done as it arrives.
// It returns the bytes downloaded. The Provider's ImportLimits bound it: all the job's
// downloads together fetch at most MaxSize (a larger Content-Length is refused before
// the body is read, a longer body is cut), a download that receives nothing for
// IdleTimeout fails, redirects go only to http and https, and no connection is made to
// a refused address. Its errors say what to fix and name the URL without credentials.
func (j *ImportJob) Download(ctx context.Context, rawURL, checksum string, w io.Writer, weight int64) (int64, error) {
	src := redact.URL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, fmt.Errorf("the image source %s is not an http or https URL", src)
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
	// A literal address is refused before anything is dialed; a name, when it is dialed.
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := j.limits.checkAddr(u.Hostname(), a); err != nil {
			return 0, fmt.Errorf("refused to download %s: %w", src, err)
		}
	}
	maxBytes, maxText := j.limits.maxSize()
	left := maxBytes - j.downloaded.Load()
	// tooLarge says what is over the limit, e.g. "is 80Gi, over".
	tooLarge := func(what string) error {
		return &limitError{fmt.Sprintf("the image at %s %s the Provider's %s of %s; raise parameters.%s or use a smaller image",
			src, what, ParamMaxImportSize, maxText, ParamMaxImportSize)}
	}

	idle := j.limits.idleTimeout()
	dctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	timer := time.AfterFunc(idle, func() {
		stop(&limitError{fmt.Sprintf("the server of %s sent nothing for %s, the Provider's %s; check the server, or raise parameters.%s",
			src, idle, ParamImportIdleTimeout, ParamImportIdleTimeout)})
	})
	defer timer.Stop()

	req, err := http.NewRequestWithContext(dctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, redact.Text(RootCause(err)))
	}
	res, err := j.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("failed to download %s: %s", src, downloadProblem(dctx, err))
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return 0, &HTTPStatusError{URL: src, Code: res.StatusCode, Status: res.Status}
	}
	if res.ContentLength > left {
		if already := maxBytes - left; already > 0 {
			return 0, tooLarge(fmt.Sprintf("is %s, which with the %s of the files before it is over", humanBytes(res.ContentLength), humanBytes(already)))
		}
		return 0, tooLarge(fmt.Sprintf("is %s, over", humanBytes(res.ContentLength)))
	}
	if res.ContentLength > 0 {
		j.Expect(weight * res.ContentLength)
	}
	if sum != nil {
		w = io.MultiWriter(w, sum)
	}
	body := &boundedReader{r: res.Body, left: left, idle: idle, timer: timer}
	n, err := io.Copy(w, j.Track(body))
	j.downloaded.Add(n)
	switch {
	case body.over:
		return 0, tooLarge("is larger than")
	case err != nil:
		return 0, fmt.Errorf("failed to download %s: %s", src, downloadProblem(dctx, err))
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

// HTTPStatusError is a download the server answered with a status other than 200 OK,
// e.g. 404 for a file that an image's package may or may not have.
type HTTPStatusError struct {
	// URL is the URL downloaded, without credentials.
	URL string
	// Code and Status are the server's answer, e.g. 404 and "404 Not Found".
	Code   int
	Status string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("failed to download %s: HTTP %s", e.URL, e.Status)
}

// boundedReader reads at most left bytes of r, and re-arms timer for idle on every byte
// that arrives.
type boundedReader struct {
	r     io.Reader
	left  int64
	over  bool
	idle  time.Duration
	timer *time.Timer
}

// errTooLarge stops a copy at the size limit; Download reports it.
var errTooLarge = errors.New("over the size limit")

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than allowed tells a body that ends at the limit from a longer one.
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			b.over = true
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	b.left -= int64(n)
	return n, err
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
