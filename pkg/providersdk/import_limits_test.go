package providersdk

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestImportLimitsFrom(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		want    ImportLimits
		wantErr string
	}{
		{name: "no parameters are the defaults", params: nil, want: ImportLimits{}},
		{name: "every parameter is read",
			params: map[string]string{"maxImportSize": "10Gi", "importTimeout": "90m", "importIdleTimeout": "30s", "allowLoopbackImports": "true"},
			want:   ImportLimits{MaxSize: resource.MustParse("10Gi"), Timeout: 90 * time.Minute, IdleTimeout: 30 * time.Second, AllowLoopback: true}},
		{name: "allowLoopbackImports false keeps loopback refused", params: map[string]string{"allowLoopbackImports": "false"}, want: ImportLimits{}},
		{name: "a size that is no quantity names maxImportSize", params: map[string]string{"maxImportSize": "big"},
			wantErr: `parameters.maxImportSize "big" is not a quantity such as 64Gi; fix it in the Provider`},
		{name: "a size of zero names maxImportSize", params: map[string]string{"maxImportSize": "0"},
			wantErr: `parameters.maxImportSize "0" must be more than 0; fix it in the Provider`},
		{name: "a timeout that is no duration names importTimeout", params: map[string]string{"importTimeout": "6 hours"},
			wantErr: `parameters.importTimeout "6 hours" is not a duration such as 6h; fix it in the Provider`},
		{name: "a negative idle timeout names importIdleTimeout", params: map[string]string{"importIdleTimeout": "-1m"},
			wantErr: `parameters.importIdleTimeout "-1m" must be more than 0; fix it in the Provider`},
		{name: "allowLoopbackImports other than true or false is refused", params: map[string]string{"allowLoopbackImports": "yes"},
			wantErr: `parameters.allowLoopbackImports "yes" is neither "true" nor "false"; fix it in the Provider`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ImportLimitsFrom(tc.params)
			gotErr := ""
			if err := got.Err(); err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr {
				t.Fatalf("Err() = %q, want %q", gotErr, tc.wantErr)
			}
			if tc.wantErr != "" {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(ImportLimits{}), cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("ImportLimitsFrom (-want +got):\n%s", diff)
			}
		})
	}
}

// token is the secret every test URL carries in its query; no message may show it.
const token = "s3cret-token"

// countingServer is a loopback server of handler that counts the connections made to it.
func countingServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestDownloadIsBoundedByTheProvidersLimits(t *testing.T) {
	image := bytes.Repeat([]byte{0xab}, 4096)
	loopback := map[string]string{"allowLoopbackImports": "true", "maxImportSize": "1Ki", "importIdleTimeout": "200ms"}
	for _, tc := range []struct {
		name    string
		params  map[string]string
		handler http.HandlerFunc
		// url is the URL to download, given the server's.
		url func(srv string) string
		// want is in the error; "" for a download that succeeds.
		want string
		// wantBytes is the most bytes that may reach the writer.
		wantBytes int
		// wantConns is how many connections the server saw; -1 for any.
		wantConns int32
	}{
		{name: "an image within the limits is downloaded",
			params:  map[string]string{"allowLoopbackImports": "true"},
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(image) },
			url:     func(srv string) string { return srv + "/a.qcow2?token=" + token }, wantBytes: len(image), wantConns: 1},
		{name: "a Content-Length over maxImportSize is refused before the body is read",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(image)))
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the body never comes: only the header may be read
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "/a.qcow2 is 4Ki, over the Provider's maxImportSize of 1Ki; raise parameters.maxImportSize or use a smaller image", wantConns: 1},
		{name: "a body without a Content-Length that grows past maxImportSize is cut",
			params: loopback,
			handler: func(w http.ResponseWriter, _ *http.Request) {
				for i := 0; i < len(image); i += 512 {
					_, _ = w.Write(image[i : i+512])
					w.(http.Flusher).Flush()
				}
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "/a.qcow2 is larger than the Provider's maxImportSize of 1Ki", wantBytes: 1024, wantConns: 1},
		{name: "a server that stalls fails after importIdleTimeout",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(image[:100])
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "/a.qcow2 sent nothing for 200ms, the Provider's importIdleTimeout; check the server, or raise parameters.importIdleTimeout", wantBytes: 100, wantConns: 1},
		{name: "a redirect to another scheme is not followed",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "ftp://images.example/a.qcow2?token="+token, http.StatusFound)
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "it redirects to ftp://images.example/a.qcow2, which is not an http or https URL", wantConns: 1},
		{name: "a redirect to a link-local address is refused without connecting to it",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/?token="+token, http.StatusFound)
			},
			url: func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "it redirects to http://169.254.169.254/latest/meta-data/, and 169.254.169.254 is a link-local address, " +
				"where cloud metadata services listen", wantConns: 1},
		{name: "a redirect to an IPv4-mapped link-local address is refused too",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://[::ffff:169.254.169.254]/?token="+token, http.StatusFound)
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "::ffff:169.254.169.254 is 169.254.169.254, a link-local address", wantConns: 1},
		{name: "more than ten redirects are not followed",
			params: loopback,
			handler: func(w http.ResponseWriter, r *http.Request) {
				n, _ := strconv.Atoi(r.URL.Query().Get("n"))
				http.Redirect(w, r, fmt.Sprintf("/a.qcow2?n=%d&token=%s", n+1, token), http.StatusFound)
			},
			url:  func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want: "it redirects more than 10 times; set importFrom to the image's final URL", wantConns: -1},
		{name: "a loopback address is refused without allowLoopbackImports, before dialing",
			params:    nil,
			handler:   func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(image) },
			url:       func(srv string) string { return srv + "/a.qcow2?token=" + token },
			want:      `127.0.0.1 is a loopback address, the provider's own host; set the Provider's parameters.allowLoopbackImports to "true" to import from it`,
			wantConns: 0},
		{name: "a name that resolves to loopback is refused at connect time without allowLoopbackImports",
			params:  nil,
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(image) },
			url: func(srv string) string {
				return strings.Replace(srv, "127.0.0.1", "localhost", 1) + "/a.qcow2?token=" + token
			},
			want: "is a loopback address, the provider's own host", wantConns: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, conns := countingServer(t, tc.handler)
			limits := ImportLimitsFrom(tc.params)
			if err := limits.Err(); err != nil {
				t.Fatal(err)
			}
			var (
				mu     sync.Mutex
				dialed []string
			)
			j := &ImportJob{limits: limits, client: newImportClient(limits, func(address string) {
				mu.Lock()
				defer mu.Unlock()
				dialed = append(dialed, address)
			})}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out bytes.Buffer
			n, err := j.Download(ctx, tc.url(srv.URL), "", &out, 1)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Download: %v", err)
			case tc.want == "" && n != int64(len(image)):
				t.Errorf("Download = %d bytes, want %d", n, len(image))
			case tc.want != "" && err == nil:
				t.Fatalf("Download succeeded; want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Download error\n %q\nwant it to contain\n %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), token) {
				t.Errorf("Download error %q shows the URL's token", err)
			}
			if out.Len() > tc.wantBytes {
				t.Errorf("%d bytes reached the writer, want at most %d", out.Len(), tc.wantBytes)
			}
			if got := conns.Load(); tc.wantConns >= 0 && got != tc.wantConns {
				t.Errorf("the server saw %d connections, want %d", got, tc.wantConns)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range dialed {
				if ap, err := netip.ParseAddrPort(a); err != nil || !ap.Addr().Unmap().IsLoopback() {
					t.Errorf("the client was about to connect to %s; only loopback may be dialed", a)
				}
			}
		})
	}
}

func TestImportsAreBoundedInTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{name: "an import that outlasts importTimeout fails saying so", params: map[string]string{"importTimeout": "100ms"},
			want: "the import took longer than the Provider's importTimeout of 100ms; raise parameters.importTimeout or import from a faster server"},
		{name: "an invalid parameter fails the import naming it", params: map[string]string{"importIdleTimeout": "soon"},
			want: `parameters.importIdleTimeout "soon" is not a duration such as 5m; fix it in the Provider`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := NewImports(time.Now, ImportLimitsFrom(tc.params))
			t.Cleanup(im.Stop)
			from := "https://images.example/a.qcow2?token=" + token
			j := im.Ensure(context.Background(), "img-1", "key", from, func(ctx context.Context, _ *ImportJob) (string, error) {
				<-ctx.Done() // an upload that never ends, as a backend that hangs
				return "", fmt.Errorf("failed to upload to %s: %w", from, ctx.Err())
			})
			deadline := time.Now().Add(20 * time.Second)
			res := j.Result("volume x", from, "libvirt")
			for res.InProgress && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				res = j.Result("volume x", from, "libvirt")
			}
			want := "import of volume x from https://images.example/a.qcow2 into libvirt failed: " + tc.want
			if res.Reason != "ImportFailed" || res.Message != want {
				t.Errorf("Result = %+v\nwant ImportFailed %q", res, want)
			}
		})
	}
}

func TestCheckSourceRefusesAddressesImportsNeverReach(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		params    map[string]string
		want      string
	}{
		{name: "a link-local literal is refused", url: "http://169.254.169.254/latest?token=" + token,
			want: "169.254.169.254 is a link-local address, where cloud metadata services listen; images are never imported from link-local addresses"},
		{name: "an IPv6 link-local literal is refused", url: "http://[fe80::1]/a.qcow2",
			want: "fe80::1 is a link-local address"},
		{name: "the unspecified address is refused", url: "http://0.0.0.0:8080/a.qcow2",
			want: "0.0.0.0 is an unspecified address; images are never imported from it; use the image server's own address"},
		{name: "a multicast address is refused", url: "http://[ff05::1]/a.qcow2", want: "ff05::1 is a multicast address"},
		{name: "loopback is refused without the opt-in", url: "http://127.0.0.1:1/a.qcow2",
			want: `127.0.0.1 is a loopback address, the provider's own host; set the Provider's parameters.allowLoopbackImports to "true" to import from it`},
		{name: "a name that resolves to loopback is refused without the opt-in", url: "http://localhost:1/a.qcow2",
			want: "localhost resolves to"},
		{name: "loopback is allowed with the opt-in", url: "http://[::1]:1/a.qcow2", params: map[string]string{"allowLoopbackImports": "true"}},
		{name: "a private address is allowed", url: "https://10.0.0.5/a.qcow2"},
		{name: "a URL of another scheme is refused", url: "ftp://images.example/a.qcow2?token=" + token,
			want: "the image source ftp://images.example/a.qcow2 is not an http or https URL"},
		{name: "an invalid parameter is the error", url: "https://10.0.0.5/a.qcow2", params: map[string]string{"maxImportSize": "x"},
			want: "parameters.maxImportSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ImportLimitsFrom(tc.params).CheckSource(context.Background(), tc.url)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckSource: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckSource = %v; want an error with %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), token):
				t.Errorf("CheckSource error %q shows the URL's token", err)
			}
		})
	}
}
