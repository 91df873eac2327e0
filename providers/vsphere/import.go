package vsphere

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
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmware/govmomi/nfc"
	"github.com/vmware/govmomi/object"
	ovfimporter "github.com/vmware/govmomi/ovf/importer"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	k8stypes "k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// importRetry is how long a failed import is reported before it is tried again.
const importRetry = 5 * time.Minute

// importer runs the session's template imports in the background, one per image at a
// time. The imports belong to the session: Disconnect cancels them.
type importer struct {
	s      *session
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	jobs map[k8stypes.UID]*importJob
	wg   sync.WaitGroup
}

// importJob is one image's import: download (checking the checksum), then upload
// through an HttpNfcLease, then mark the VM a template.
type importJob struct {
	name, from, checksum string
	cancel               context.CancelFunc

	// done and total count downloaded plus uploaded bytes; total is 0 until known.
	done, total atomic.Int64

	mu       sync.Mutex
	finished time.Time
	err      error
	ref      string
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

// forget drops the record of an image's import once its template exists.
func (im *importer) forget(uid k8stypes.UID) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if j := im.jobs[uid]; j != nil && !j.finishedAt().IsZero() {
		delete(im.jobs, uid)
	}
}

// ensure starts the import of an image unless one runs, and reports it. A failed import
// is reported for importRetry, then tried again; a changed source restarts it.
func (im *importer) ensure(ctx context.Context, img *providersdk.Image, name, from string) providersdk.ImageResult {
	log := ctrl.LoggerFrom(ctx).WithValues("template", name)
	im.mu.Lock()
	defer im.mu.Unlock()
	j := im.jobs[img.UID]
	if j != nil && (j.name != name || j.from != from || j.checksum != img.Source.Checksum) {
		j.cancel()
		j = nil
	}
	if j != nil {
		if at := j.finishedAt(); !at.IsZero() && im.s.driver.now().Sub(at) >= importRetry {
			j = nil
		}
	}
	if j == nil {
		ctx, cancel := context.WithCancel(ctrl.LoggerInto(im.ctx, log))
		j = &importJob{name: name, from: from, checksum: img.Source.Checksum, cancel: cancel}
		im.jobs[img.UID] = j
		log.Info("Importing template", "from", redact(from))
		im.wg.Add(1)
		go func() {
			defer im.wg.Done()
			defer cancel()
			ref, err := im.run(ctx, j)
			j.mu.Lock()
			j.finished, j.err, j.ref = im.s.driver.now(), err, ref
			j.mu.Unlock()
			if err != nil {
				log.Error(err, "Template import failed")
			} else {
				log.Info("Imported template", "moRef", ref)
			}
		}()
	}
	return j.result(im.s.host)
}

func (j *importJob) finishedAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
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
			Message:    fmt.Sprintf("importing template %q from %s: %d%%", j.name, src, pct),
		}
	case j.err != nil:
		return providersdk.ImageResult{
			Reason:  banlieuev1.ImageImportFailedReason,
			Message: fmt.Sprintf("import of template %q from %s into vCenter %s failed: %s", j.name, src, host, j.err.Error()),
		}
	}
	return providersdk.ImageResult{Ready: true, ResolvedRef: j.ref}
}

// run downloads the OVA (or OVF and its files) to a temporary directory, imports it into
// the first failure domain and marks it a template.
func (im *importer) run(ctx context.Context, j *importJob) (string, error) {
	dir, err := os.MkdirTemp("", "banlieue-import-")
	if err != nil {
		return "", fmt.Errorf("failed to make a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	u, err := url.Parse(j.from)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", errors.New("importFrom is not an http or https URL")
	}
	local := filepath.Join(dir, path.Base(u.Path))
	if err := im.download(ctx, j, u, local, j.checksum); err != nil {
		return "", err
	}
	var archive ovfimporter.Archive = &ovfimporter.TapeArchive{Path: local}
	descriptor := "*.ovf"
	if strings.HasSuffix(strings.ToLower(u.Path), ".ovf") {
		archive = &ovfimporter.FileArchive{Path: local}
		descriptor = local
		if err := im.downloadReferences(ctx, j, u, local); err != nil {
			return "", err
		}
	}

	inv, err := im.s.domains(ctx, false)
	if err != nil {
		return "", err
	}
	if len(inv.domains) == 0 {
		return "", errors.New("vCenter has no compute cluster to import into")
	}
	fd := inv.domains[0]
	pl, err := im.s.place(ctx, &providersdk.Machine{Spec: infrav1.MachineSpec{FailureDomain: fd.name}}, &infrav1.VSphereOptions{})
	if err != nil {
		return "", err
	}
	imp := &ovfimporter.Importer{
		Client:       im.s.vim,
		Archive:      archive,
		Log:          func(string) (int, error) { return 0, nil },
		ResourcePool: object.NewResourcePool(im.s.vim, pl.pool),
		Folder:       object.NewFolder(im.s.vim, pl.folder),
		Datastore:    object.NewDatastore(im.s.vim, im.importDatastore(pl)),
	}
	name := j.name
	info, lease, err := imp.ImportVApp(ctx, descriptor, ovfimporter.Options{Name: &name, DiskProvisioning: string(types.OvfCreateImportSpecParamsDiskProvisioningTypeThin)})
	if err != nil {
		return "", im.s.fail("start the import", err)
	}
	updater := lease.StartUpdater(ctx, info)
	defer updater.Done()
	for _, item := range info.Items {
		if err := im.upload(ctx, j, archive, lease, item); err != nil {
			_ = lease.Abort(context.WithoutCancel(ctx), &types.LocalizedMethodFault{Fault: &types.FileFault{File: item.Path}})
			return "", err
		}
	}
	if err := lease.Complete(ctx); err != nil {
		return "", im.s.fail("complete the import", err)
	}
	if err := object.NewVirtualMachine(im.s.vim, info.Entity).MarkAsTemplate(ctx); err != nil {
		return "", im.s.fail("mark the imported VM a template", err)
	}
	return info.Entity.Value, nil
}

// importDatastore is where imports go: the datastore parameter, else the failure
// domain's datastore with the most free space.
func (im *importer) importDatastore(pl *placement) types.ManagedObjectReference {
	if pl.datastore != nil {
		return pl.datastore.ref
	}
	var best datastoreInfo
	for _, ds := range pl.fd.datastores {
		if best.ref.Value == "" || ds.free > best.free || ds.free == best.free && ds.name < best.name {
			best = ds
		}
	}
	return best.ref
}

// upload sends one file of the archive through the lease, counting progress.
func (im *importer) upload(ctx context.Context, j *importJob, a ovfimporter.Archive, lease *nfc.Lease, item nfc.FileItem) error {
	f, size, err := a.Open(item.Path)
	if err != nil {
		return fmt.Errorf("failed to open %s in the image: %w", item.Path, err)
	}
	defer func() { _ = f.Close() }()
	if err := lease.Upload(ctx, item, &counter{r: f, n: &j.done}, soap.Upload{ContentLength: size}); err != nil {
		return im.s.fail("upload "+item.Path, err)
	}
	return nil
}

// download fetches u into file, checking its digest when want is set.
func (im *importer) download(ctx context.Context, j *importJob, u *url.URL, file, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("failed to download %s: %w", redact(u.String()), err)
	}
	res, err := im.s.driver.httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("failed to download %s: %s", redact(u.String()), providersdk.RootCause(err))
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to download %s: HTTP %s", redact(u.String()), res.Status)
	}
	if res.ContentLength > 0 {
		// Downloading and uploading each count for half of the progress.
		j.total.Add(2 * res.ContentLength)
	}
	var sum hash.Hash
	algo, hexWant, _ := strings.Cut(want, ":")
	switch algo {
	case "":
	case "sha256":
		sum = sha256.New()
	case "sha512":
		sum = sha512.New()
	default:
		return fmt.Errorf("checksum %q is neither sha256:<hex> nor sha512:<hex>", want)
	}
	out, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("failed to write the download: %w", err)
	}
	defer func() { _ = out.Close() }()
	w := io.Writer(out)
	if sum != nil {
		w = io.MultiWriter(out, sum)
	}
	if _, err := io.Copy(w, &counter{r: res.Body, n: &j.done}); err != nil {
		return fmt.Errorf("failed to download %s: %s", redact(u.String()), providersdk.RootCause(err))
	}
	if sum != nil {
		if got := hex.EncodeToString(sum.Sum(nil)); !strings.EqualFold(got, hexWant) {
			return fmt.Errorf("checksum mismatch: the download has %s:%s, the image source wants %s", algo, got, want)
		}
	}
	return out.Close()
}

// downloadReferences fetches the files an OVF descriptor references, next to it.
func (im *importer) downloadReferences(ctx context.Context, j *importJob, u *url.URL, descriptor string) error {
	data, err := os.ReadFile(descriptor)
	if err != nil {
		return fmt.Errorf("failed to read the OVF descriptor: %w", err)
	}
	env, err := ovfimporter.ReadEnvelope(data)
	if err != nil {
		return fmt.Errorf("failed to parse the OVF descriptor: %w", err)
	}
	for _, f := range env.References {
		if strings.Contains(f.Href, "..") || path.IsAbs(f.Href) || strings.Contains(f.Href, "://") {
			return fmt.Errorf("the OVF descriptor references %q, outside its directory", f.Href)
		}
		ref := u.ResolveReference(&url.URL{Path: f.Href})
		if err := im.download(ctx, j, ref, filepath.Join(filepath.Dir(descriptor), filepath.FromSlash(f.Href)), ""); err != nil {
			return err
		}
	}
	return nil
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
