package proxmox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	k8stypes "k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/banlieue/banlieue/api/infrastructure/v1alpha1"
	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
	"github.com/banlieue/banlieue/providers/proxmox/pve"
	proxmoxsim "github.com/banlieue/banlieue/sim/proxmox"
)

// Request templates the import tests count.
const (
	downloadURLRequest = "POST /nodes/{node}/storage/{storage}/download-url"
	createVMRequest    = "POST /nodes/{node}/qemu"
)

// imageServer serves a disk image at /jammy.qcow2 on loopback and counts its
// downloads.
type imageServer struct {
	*httptest.Server
	gets atomic.Int32

	mu   sync.Mutex
	data []byte
}

// serveImage serves a qcow2 image of 2 GiB and stops serving when the test ends.
func serveImage(t *testing.T) *imageServer {
	t.Helper()
	srv := &imageServer{data: qcow2Image(2, 'a')}
	srv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jammy.qcow2" {
			http.NotFound(w, r)
			return
		}
		srv.gets.Add(1)
		srv.mu.Lock()
		defer srv.mu.Unlock()
		_, _ = w.Write(srv.data)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// url is the image's URL.
func (srv *imageServer) url() string { return srv.URL + "/jammy.qcow2" }

// serve replaces the image, as a new release at the same URL does.
func (srv *imageServer) serve(data []byte) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.data = data
}

// qcow2Image is a 4 KiB file whose qcow2 header gives a virtual size of sizeGiB,
// which is what PVE's import-from reads, filled with fill.
func qcow2Image(sizeGiB uint64, fill byte) []byte {
	b := []byte(strings.Repeat(string(fill), 4096))
	copy(b, "QFI\xfb")
	binary.BigEndian.PutUint32(b[4:8], 3)
	binary.BigEndian.PutUint64(b[24:32], sizeGiB<<30)
	return b
}

// sha256Hex is data's SHA-256 in hex.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// urlImage is the VMImage "jammy" with a Url source for Proxmox VE.
func urlImage(url string, data []byte) *providersdk.Image {
	return &providersdk.Image{
		Name: "jammy",
		UID:  k8stypes.UID("5f0c1a2b-0000-4000-8000-00000000000a"),
		Source: banlieuev1.ImageSource{
			ProviderClass: ProviderClass, Kind: banlieuev1.ImageSourceURL, ImportFrom: url, Checksum: "sha256:" + sha256Hex(data),
		},
	}
}

// resolve calls ResolveImage until the import is no longer in progress, as the image
// reconciler does, and returns the last answer.
func resolve(t *testing.T, s *session, img *providersdk.Image) providersdk.ImageResult {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.ResolveImage(context.Background(), img)
		if err != nil {
			t.Fatalf("ResolveImage: %v", err)
		}
		if !res.InProgress {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("import still in progress after 30s: %s", res.Message)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// importedConfig reads the config of the template a result resolves to.
func importedConfig(t *testing.T, sim *proxmoxtest.Simulator, res providersdk.ImageResult) (int, map[string]string) {
	t.Helper()
	_, id, _ := strings.Cut(res.ResolvedRef, "/")
	vmid, err := strconv.Atoi(id)
	if err != nil {
		t.Fatalf("ResolvedRef %q is not <node>/<vmid>", res.ResolvedRef)
	}
	conf, ok := sim.VM(vmid)
	if !ok {
		t.Fatalf("VM %d of ResolvedRef %q does not exist", vmid, res.ResolvedRef)
	}
	return vmid, conf
}

func TestURLImageIsImportedAsATemplateOnce(t *testing.T) {
	sim := proxmoxtest.Start(t)
	srv := serveImage(t)
	img := urlImage(srv.url(), srv.data)
	s := connect(t, sim, newDriver(sim))
	res := resolve(t, s, img)
	if !res.Ready || !strings.HasPrefix(res.ResolvedRef, proxmoxtest.Node1+"/") {
		t.Fatalf("ResolveImage = %+v, want ready on %s", res, proxmoxtest.Node1)
	}
	vmid, conf := importedConfig(t, sim, res)
	disk, net := pve.ParseProperty(conf["scsi0"]), pve.ParseProperty(conf["net0"])
	got := map[string]string{
		"template": conf["template"], "name": conf["name"], "agent": conf["agent"], "ide2": conf["ide2"],
		"disk": disk.First, "size": disk.Opts["size"], "bridge": net.Opts["bridge"],
		"uid": descriptionValue(conf["description"], DescriptionImageUIDKey),
	}
	want := map[string]string{
		"template": "1", "name": "banlieue-jammy-" + sha256Hex(srv.data)[:8], "agent": "1",
		"ide2": "local-lvm:vm-" + strconv.Itoa(vmid) + "-cloudinit,media=cdrom",
		// The disk has the 2 GiB its qcow2 header gives: it came from the download.
		"disk": "local-lvm:base-" + strconv.Itoa(vmid) + "-disk-0", "size": "2G", "bridge": proxmoxtest.Bridge,
		"uid": string(img.UID),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imported template (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name string
		s    *session
	}{
		{name: "the same session finds the template again", s: s},
		{name: "a new session, as after a provider restart, finds the template", s: connect(t, sim, newDriver(sim))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(res, resolve(t, tt.s, img)); diff != "" {
				t.Errorf("ResolveImage (-want +got):\n%s", diff)
			}
		})
	}
	if n := sim.Requests()[downloadURLRequest]; n != 1 || srv.gets.Load() != 1 {
		t.Errorf("%d download-url requests and %d downloads, want 1 of each", n, srv.gets.Load())
	}
}

func TestURLImageReportsProgressWhileDownloading(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"download": 500 * time.Millisecond}
	})
	srv := serveImage(t)
	img := urlImage(srv.url(), srv.data)
	want := providersdk.ImageResult{
		InProgress: true, Reason: banlieuev1.ImageImportingReason,
		Message: "downloading " + srv.url() + " as banlieue-jammy-" + sha256Hex(srv.data)[:12] + ".qcow2",
	}
	for _, tt := range []struct {
		name string
		s    *session
	}{
		{name: "the session that starts the download reports it", s: connect(t, sim, newDriver(sim))},
		{name: "a new session finds the running download instead of starting another", s: connect(t, sim, newDriver(sim))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.ResolveImage(context.Background(), img)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ResolveImage (-want +got):\n%s", diff)
			}
		})
	}
	if res := resolve(t, connect(t, sim, newDriver(sim)), img); !res.Ready {
		t.Fatalf("ResolveImage after the download = %+v, want ready", res)
	}
	if n := sim.Requests()[downloadURLRequest]; n != 1 {
		t.Errorf("%d download-url requests, want 1", n)
	}
}

func TestURLImageCreatedByAGoneSessionIsAdopted(t *testing.T) {
	sim := proxmoxtest.Start(t, func(o *proxmoxsim.Options) {
		o.TaskDelays = map[string]time.Duration{"qmcreate": 300 * time.Millisecond}
	})
	srv := serveImage(t)
	img := urlImage(srv.url(), srv.data)
	first := connect(t, sim, newDriver(sim))
	for sim.Requests()[createVMRequest] == 0 {
		if _, err := first.ResolveImage(context.Background(), img); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The provider restarts while PVE makes the template's VM.
	if res := resolve(t, connect(t, sim, newDriver(sim)), img); !res.Ready {
		t.Fatalf("ResolveImage = %+v, want ready", res)
	}
	if n := sim.Requests()[createVMRequest]; n != 1 {
		t.Errorf("%d VM create requests, want 1", n)
	}
}

func TestURLImageImportFailures(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String() + "/jammy.qcow2"
	_ = closed.Close()
	tests := []struct {
		name    string
		url     func(*imageServer) string
		sum     string
		prepare func(*proxmoxtest.Simulator)
		want    string
	}{{
		name: "a checksum that does not match fails with PVE's checksum mismatch",
		sum:  sha256Hex([]byte("another image")),
		want: "checksum mismatch: got '" + sha256Hex(qcow2Image(2, 'a')) + "' != expect '" + sha256Hex([]byte("another image")) + "'",
	}, {
		name: "a URL that answers 404 fails with the HTTP status",
		url:  func(srv *imageServer) string { return srv.URL + "/noble.qcow2" },
		want: "download failed: 404 Not Found",
	}, {
		name: "an unreachable URL fails with the connection error",
		url:  func(*imageServer) string { return closedURL },
		want: "connection refused",
	}, {
		name: "a full storage fails with PVE's message",
		prepare: func(sim *proxmoxtest.Simulator) {
			sim.FailNextTask("download", "write failed: No space left on device")
		},
		want: "write failed: No space left on device",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			srv := serveImage(t)
			img := urlImage(srv.url(), srv.data)
			if tt.url != nil {
				img.Source.ImportFrom = tt.url(srv)
			}
			if tt.sum != "" {
				img.Source.Checksum = "sha256:" + tt.sum
			}
			if tt.prepare != nil {
				tt.prepare(sim)
			}
			d := newDriver(sim)
			s := connect(t, sim, d)
			res := resolve(t, s, img)
			if res.Ready || res.Reason != banlieuev1.ImageImportFailedReason || !strings.Contains(res.Message, tt.want) {
				t.Fatalf("ResolveImage = %+v, want ImportFailed saying %q", res, tt.want)
			}
			if again := resolve(t, s, img); again != res || sim.Requests()[downloadURLRequest] != 1 {
				t.Errorf("ResolveImage right after the failure = %+v with %d downloads, want the failure again and no new download",
					again, sim.Requests()[downloadURLRequest])
			}
			d.now = func() time.Time { return time.Now().Add(providersdk.ImportRetry) }
			if retry, _ := s.ResolveImage(context.Background(), img); !retry.InProgress || sim.Requests()[downloadURLRequest] != 2 {
				t.Errorf("ResolveImage %s after the failure = %+v, want a new download", providersdk.ImportRetry, retry)
			}
		})
	}
}

func TestChangedChecksumImportsANewTemplate(t *testing.T) {
	sim := proxmoxtest.Start(t)
	srv := serveImage(t)
	s := connect(t, sim, newDriver(sim))
	old := resolve(t, s, urlImage(srv.url(), srv.data))
	newer := qcow2Image(3, 'b')
	srv.serve(newer)
	res := resolve(t, s, urlImage(srv.url(), newer))
	if !res.Ready || res.ResolvedRef == old.ResolvedRef {
		t.Fatalf("ResolveImage of the new checksum = %+v, want a template other than %s", res, old.ResolvedRef)
	}
	if _, conf := importedConfig(t, sim, res); pve.ParseProperty(conf["scsi0"]).Opts["size"] != "3G" {
		t.Errorf("new template's disk is %s, want the new image's 3G", conf["scsi0"])
	}
	if n := sim.Requests()[downloadURLRequest]; n != 2 {
		t.Errorf("%d download-url requests, want 2", n)
	}
}

func TestTemplateSourceWithImportFromImportsTheMissingTemplate(t *testing.T) {
	sim := proxmoxtest.Start(t)
	srv := serveImage(t)
	s := connect(t, sim, newDriver(sim))
	img := urlImage(srv.url(), srv.data)
	img.Source.Kind, img.Source.Ref = banlieuev1.ImageSourceTemplate, "jammy-tpl"
	res := resolve(t, s, img)
	if !res.Ready {
		t.Fatalf("ResolveImage = %+v, want ready", res)
	}
	if _, conf := importedConfig(t, sim, res); conf["name"] != "jammy-tpl" {
		t.Errorf("imported template is named %q, want the source's ref jammy-tpl", conf["name"])
	}
}

func TestMachineFromImportedTemplateConverges(t *testing.T) {
	sim := proxmoxtest.Start(t)
	srv := serveImage(t)
	s := connect(t, sim, newDriver(sim))
	res := resolve(t, s, urlImage(srv.url(), srv.data))
	m := newMachine("6a1b2c3d-0000-4000-8000-00000000000b")
	m.Spec.Image = infrav1.MachineImage{Name: "jammy", Kind: banlieuev1.ImageSourceURL, ResolvedRef: res.ResolvedRef}
	converge(t, s, m)
	vm := theVM(t, sim)
	if diff := cmp.Diff([]int64{proxmoxtest.TemplateDiskGiB}, sizes(vm.Config)); diff != "" {
		t.Errorf("disk sizes in GiB (-want +got):\n%s", diff)
	}
	if got := descriptionUID(vm.Config["description"]); got != string(m.UID) {
		t.Errorf("VM's description names UID %q, want %q", got, m.UID)
	}
}

func TestASourceImportsNeverReachIsRefusedBeforePVEIsAskedToDownload(t *testing.T) {
	for _, tt := range []struct {
		name   string
		url    func(*imageServer) string
		params map[string]string
		want   string
	}{{
		name: "a loopback source without allowLoopbackImports",
		url:  func(srv *imageServer) string { return srv.url() + "?token=s3cret" },
		want: `127.0.0.1 is a loopback address, the provider's own host; set the Provider's parameters.allowLoopbackImports to "true" to import from it`,
	}, {
		name:   "a link-local source, whatever the Provider allows",
		url:    func(*imageServer) string { return "http://169.254.169.254/latest/jammy.qcow2?token=s3cret" },
		params: map[string]string{providersdk.ParamAllowLoopbackImports: "true"},
		want:   "169.254.169.254 is a link-local address, where cloud metadata services listen",
	}, {
		name:   "an invalid import parameter",
		url:    func(srv *imageServer) string { return srv.url() },
		params: map[string]string{providersdk.ParamAllowLoopbackImports: "yes"},
		want:   `parameters.allowLoopbackImports "yes" is neither "true" nor "false"; fix it in the Provider`,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			sim := proxmoxtest.Start(t)
			srv := serveImage(t)
			p := providerFor(sim)
			p.Spec.Parameters = tt.params
			cl, err := newDriver(sim).Connect(context.Background(), infoFor(sim, p))
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			t.Cleanup(func() { _ = cl.Disconnect(context.Background()) })
			res := resolve(t, cl.(*session), urlImage(tt.url(srv), srv.data))
			if res.Reason != banlieuev1.ImageImportFailedReason || !strings.Contains(res.Message, tt.want) || strings.Contains(res.Message, "s3cret") {
				t.Errorf("ResolveImage = %+v; want ImportFailed saying %q, without the token", res, tt.want)
			}
			if n := sim.Requests()[downloadURLRequest]; n != 0 || srv.gets.Load() != 0 {
				t.Errorf("PVE was asked to download %d times and the server %d times; want neither", n, srv.gets.Load())
			}
		})
	}
}
