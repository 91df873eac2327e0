package libvirt

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
)

// imageServer serves a small qcow2 made by qemu-img at /disk.qcow2 on loopback and
// counts the downloads.
func imageServer(t *testing.T) (url, checksum string, hits *atomic.Int64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/disk.qcow2" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, "sha256:" + hex.EncodeToString(sum[:]), hits
}

// resolveUntilDone calls ResolveImage until no import is in progress.
func resolveUntilDone(t *testing.T, s *session, img *providersdk.Image) providersdk.ImageResult {
	t.Helper()
	var res providersdk.ImageResult
	eventually(t, 60*time.Second, func() error {
		var err error
		res, err = s.ResolveImage(t.Context(), img)
		if err != nil {
			t.Fatal(err)
		}
		if res.InProgress {
			return errString("still importing: " + res.Message)
		}
		return nil
	})
	return res
}

type errString string

func (e errString) Error() string { return string(e) }

func TestResolveImage(t *testing.T) {
	d := daemon(t)
	url, checksum, hits := imageServer(t)
	wrongSum := "sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name     string
		source   banlieuev1.ImageSource
		want     providersdk.ImageResult
		wantMsg  string
		wantHits int64
	}{
		{
			name:   "an existing volume by pool and name",
			source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceBackingFile, Ref: testPool + "/" + testImage},
			want:   providersdk.ImageResult{Ready: true, ResolvedRef: testPool + "/" + testImage},
		},
		{
			name:   "an existing volume by path",
			source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceBackingFile, Ref: filepath.Join(d.Dir, "pools", testPool, testImage)},
			want:   providersdk.ImageResult{Ready: true, ResolvedRef: testPool + "/" + testImage},
		},
		{
			name:    "a missing volume without importFrom",
			source:  banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceBackingFile, Ref: testPool + "/nope.qcow2"},
			want:    providersdk.ImageResult{Reason: banlieuev1.ImageTemplateNotFoundReason},
			wantMsg: `volume "default/nope.qcow2" does not exist`,
		},
		{
			name:    "a template source",
			source:  banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: "tmpl"},
			want:    providersdk.ImageResult{Reason: banlieuev1.ImageUnsupportedSourceReason},
			wantMsg: "source kind Template is not supported",
		},
		{
			name:     "a URL with the right checksum is imported",
			source:   banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/disk.qcow2", Checksum: checksum},
			want:     providersdk.ImageResult{Ready: true, ResolvedRef: testPool + "/" + imageVolumeName("jammy", checksum)},
			wantHits: 1,
		},
		{
			name:     "the finished import is found, not repeated",
			source:   banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/disk.qcow2", Checksum: checksum},
			want:     providersdk.ImageResult{Ready: true, ResolvedRef: testPool + "/" + imageVolumeName("jammy", checksum)},
			wantHits: 1,
		},
		{
			name:     "a changed checksum imports anew, and a mismatch fails",
			source:   banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/disk.qcow2", Checksum: wrongSum},
			want:     providersdk.ImageResult{Reason: banlieuev1.ImageImportFailedReason},
			wantMsg:  "checksum mismatch",
			wantHits: 2,
		},
		{
			name:     "a missing file fails with the HTTP status",
			source:   banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/gone.qcow2"},
			want:     providersdk.ImageResult{Reason: banlieuev1.ImageImportFailedReason},
			wantMsg:  "HTTP 404 Not Found",
			wantHits: 2,
		},
	}
	// The image server listens on loopback.
	s := connect(t, d.QEMUURI(), map[string]string{providersdk.ParamAllowLoopbackImports: "true"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := &providersdk.Image{Name: "jammy", UID: types.UID("img-" + tt.name), Source: tt.source}
			got := resolveUntilDone(t, s, img)
			if !strings.Contains(got.Message, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", got.Message, tt.wantMsg)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(providersdk.ImageResult{}, "Message")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tt.wantHits > 0 && hits.Load() != tt.wantHits {
				t.Errorf("%d downloads, want %d", hits.Load(), tt.wantHits)
			}
		})
	}
	t.Run("a machine boots from the imported image, which outlives it", func(t *testing.T) {
		ctx := t.Context()
		m := machine("from-import", func(m *providersdk.Machine) {
			m.Spec.Image.ResolvedRef = testPool + "/" + imageVolumeName("jammy", checksum)
			m.Spec.Disks = nil // one boot disk the size of the image
			m.Spec.Interfaces = nil
		})
		if err := createMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		if o := mustObserve(t, s, m); o.PowerState != banlieuev1.PowerStatePoweredOn {
			t.Errorf("power %s, want PoweredOn", o.PowerState)
		}
		inspect(t, d, func(l *libvirt.Libvirt) {
			if v := volumeXML(t, l, string(m.UID)+"-root.qcow2"); v.Capacity.Value != 64<<20 || v.BackingStore == nil {
				t.Errorf("root volume %+v, want a 64 MiB overlay", v)
			}
		})
		if err := deleteMachine(ctx, s, m); err != nil {
			t.Fatal(err)
		}
		if _, found, err := s.resolveVolume(ctx, m.Spec.Image.ResolvedRef); err != nil || !found {
			t.Errorf("the image volume is gone after the machine's deletion: %v", err)
		}
	})
	t.Run("the imported volume holds the image, and no partial upload is left", func(t *testing.T) {
		inspect(t, d, func(l *libvirt.Libvirt) {
			pool, _ := l.StoragePoolLookupByName(testPool)
			name := imageVolumeName("jammy", checksum)
			v := volumeXML(t, l, name)
			if v.Target.Format.Type != "qcow2" || v.Capacity.Value != 64<<20 {
				t.Errorf("format %s, capacity %d; want qcow2 of 64 MiB", v.Target.Format.Type, v.Capacity.Value)
			}
			for _, n := range []string{name + ".part", imageVolumeName("jammy", wrongSum), imageVolumeName("jammy", wrongSum) + ".part"} {
				if _, err := l.StorageVolLookupByName(pool, n); err == nil {
					t.Errorf("volume %s exists", n)
				}
			}
		})
	})
	t.Run("an image over the Provider's maxImportSize is refused, and no volume is made", func(t *testing.T) {
		small := connect(t, d.QEMUURI(), map[string]string{providersdk.ParamAllowLoopbackImports: "true", providersdk.ParamMaxImportSize: "64Ki"})
		img := &providersdk.Image{Name: "big", UID: "img-big", Source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/disk.qcow2?token=s3cret", Checksum: checksum}}
		got := resolveUntilDone(t, small, img)
		if got.Reason != banlieuev1.ImageImportFailedReason || !strings.Contains(got.Message, "the Provider's maxImportSize of 64Ki; raise parameters.maxImportSize or use a smaller image") ||
			strings.Contains(got.Message, "s3cret") {
			t.Errorf("ResolveImage = %+v; want ImportFailed over maxImportSize, without the token", got)
		}
		inspect(t, d, func(l *libvirt.Libvirt) {
			pool, _ := l.StoragePoolLookupByName(testPool)
			if _, err := l.StorageVolLookupByName(pool, imageVolumeName("big", checksum)); err == nil {
				t.Errorf("volume %s exists", imageVolumeName("big", checksum))
			}
		})
	})
	t.Run("an image server on loopback is refused without allowLoopbackImports", func(t *testing.T) {
		strict := connect(t, d.QEMUURI(), nil)
		img := &providersdk.Image{Name: "local", UID: "img-local", Source: banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceURL, ImportFrom: url + "/disk.qcow2"}}
		before := hits.Load()
		got := resolveUntilDone(t, strict, img)
		if got.Reason != banlieuev1.ImageImportFailedReason || !strings.Contains(got.Message, `set the Provider's parameters.allowLoopbackImports to "true"`) {
			t.Errorf("ResolveImage = %+v; want ImportFailed naming allowLoopbackImports", got)
		}
		if n := hits.Load(); n != before {
			t.Errorf("the server was asked %d times, want none", n-before)
		}
	})
}
