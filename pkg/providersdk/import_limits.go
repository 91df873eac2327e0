package providersdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/banlieue/banlieue/pkg/redact"
)

// Provider parameters (spec.parameters) that bound the image imports of every driver
// whose imports go through Imports; ImportLimitsFrom reads them.
const (
	// ParamMaxImportSize is the most bytes one image's import may download (all of an
	// OVF's files together), a quantity such as 64Gi. DefaultMaxImportSize when unset.
	ParamMaxImportSize = "maxImportSize"
	// ParamImportTimeout is how long one import may take in all, download and upload,
	// a Go duration such as 6h. DefaultImportTimeout when unset.
	ParamImportTimeout = "importTimeout"
	// ParamImportIdleTimeout fails a download that receives no byte for this long, a Go
	// duration such as 5m. DefaultImportIdleTimeout when unset.
	ParamImportIdleTimeout = "importIdleTimeout"
	// ParamAllowLoopbackImports set to "true" lets imports download from loopback
	// addresses (127.0.0.0/8, ::1), the provider's own host; they are refused otherwise.
	ParamAllowLoopbackImports = "allowLoopbackImports"
)

// Defaults of the import limits.
const (
	// DefaultImportTimeout is the default ParamImportTimeout.
	DefaultImportTimeout = 6 * time.Hour
	// DefaultImportIdleTimeout is the default ParamImportIdleTimeout.
	DefaultImportIdleTimeout = 5 * time.Minute
	// MaxImportRedirects is how many redirects a download follows.
	MaxImportRedirects = 10
)

// DefaultMaxImportSize is the default ParamMaxImportSize.
var DefaultMaxImportSize = resource.MustParse("64Gi")

// ImportLimits bound one Provider's image imports. A zero field is its default, so the
// zero ImportLimits is the defaults. Whatever the limits, a download never connects to a
// link-local (169.254.0.0/16, fe80::/10, where cloud metadata services listen),
// unspecified or multicast address, and to a loopback one only with AllowLoopback.
type ImportLimits struct {
	// MaxSize is the most bytes one import downloads; DefaultMaxImportSize when zero.
	MaxSize resource.Quantity
	// Timeout bounds one import in all; DefaultImportTimeout when zero.
	Timeout time.Duration
	// IdleTimeout fails a download that receives nothing for this long;
	// DefaultImportIdleTimeout when zero.
	IdleTimeout time.Duration
	// AllowLoopback allows downloads from loopback addresses.
	AllowLoopback bool

	// err is the first invalid parameter ImportLimitsFrom met; see Err.
	err error
}

// ImportLimitsFrom reads the import limits from a Provider's spec.parameters. A
// parameter that is unset takes its default; one that is invalid does too, and makes
// Err say which parameter to fix: Imports fails every import with that error, so a typo
// stops the Provider's imports, not its machines.
func ImportLimitsFrom(params map[string]string) ImportLimits {
	var l ImportLimits
	fail := func(err error) {
		if l.err == nil {
			l.err = err
		}
	}
	if v, ok := params[ParamMaxImportSize]; ok {
		q, err := resource.ParseQuantity(v)
		switch {
		case err != nil:
			fail(fmt.Errorf("parameters.%s %q is not a quantity such as 64Gi; fix it in the Provider", ParamMaxImportSize, v))
		case q.Sign() <= 0:
			fail(fmt.Errorf("parameters.%s %q must be more than 0; fix it in the Provider", ParamMaxImportSize, v))
		default:
			l.MaxSize = q
		}
	}
	duration := func(name, example string) time.Duration {
		v, ok := params[name]
		if !ok {
			return 0
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			fail(fmt.Errorf("parameters.%s %q is not a duration such as %s; fix it in the Provider", name, v, example))
		case d <= 0:
			fail(fmt.Errorf("parameters.%s %q must be more than 0; fix it in the Provider", name, v))
		}
		return max(d, 0)
	}
	l.Timeout = duration(ParamImportTimeout, "6h")
	l.IdleTimeout = duration(ParamImportIdleTimeout, "5m")
	switch v, ok := params[ParamAllowLoopbackImports]; {
	case !ok || v == "false":
	case v == "true":
		l.AllowLoopback = true
	default:
		fail(fmt.Errorf(`parameters.%s %q is neither "true" nor "false"; fix it in the Provider`, ParamAllowLoopbackImports, v))
	}
	return l
}

// Err is the error of the first invalid parameter ImportLimitsFrom read, naming it;
// nil when all are valid.
func (l ImportLimits) Err() error { return l.err }

// maxSize is MaxSize in bytes, its default when zero.
func (l ImportLimits) maxSize() (int64, string) {
	q := l.MaxSize
	if q.IsZero() {
		q = DefaultMaxImportSize
	}
	return q.Value(), q.String()
}

// timeout is Timeout, its default when zero.
func (l ImportLimits) timeout() time.Duration {
	if l.Timeout <= 0 {
		return DefaultImportTimeout
	}
	return l.Timeout
}

// idleTimeout is IdleTimeout, its default when zero.
func (l ImportLimits) idleTimeout() time.Duration {
	if l.IdleTimeout <= 0 {
		return DefaultImportIdleTimeout
	}
	return l.IdleTimeout
}

// CheckSource refuses, before anything is downloaded, an import source that is not
// an http or https URL, or whose host is, or resolves here to, an address imports never
// reach (see ImportLimits), with a message saying why. It is for drivers whose backend
// downloads the image itself and so cannot use Download's dial guard: the backend
// resolves the name again, possibly to something else, so this narrows what a tenant can
// point the backend at but does not bound it the way Download does. A name that does
// not resolve here is not refused: the backend may know it.
func (l ImportLimits) CheckSource(ctx context.Context, rawURL string) error {
	if err := l.err; err != nil {
		return err
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("the image source %s is not an http or https URL", redact.URL(rawURL))
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return l.checkAddr(host, a)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil //nolint:nilerr // only the backend's resolver counts; see the doc comment
	}
	for _, a := range addrs {
		if err := l.checkAddr(host, a); err != nil {
			return err
		}
	}
	return nil
}

// addressError is a download refused for the address it would connect to.
type addressError struct {
	host string
	addr netip.Addr
	// what is why, e.g. "a link-local address, ...".
	what string
}

func (e *addressError) Error() string {
	switch _, err := netip.ParseAddr(e.host); {
	case e.host == e.addr.String() || e.host == "":
		return fmt.Sprintf("%s is %s", e.addr, e.what)
	case err == nil: // another spelling of the address, e.g. IPv4-mapped IPv6
		return fmt.Sprintf("%s is %s, %s", e.host, e.addr, e.what)
	}
	return fmt.Sprintf("%s resolves to %s, %s", e.host, e.addr, e.what)
}

// checkAddr returns an addressError when a download may not connect to a, which host
// names (host may be a itself, or "" when unknown).
func (l ImportLimits) checkAddr(host string, a netip.Addr) error {
	a = a.Unmap()
	var what string
	switch {
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		what = "a link-local address, where cloud metadata services listen; images are never imported from link-local addresses"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0:
		what = "an unspecified address; images are never imported from it; use the image server's own address"
	case a.IsMulticast():
		what = "a multicast address; images are never imported from multicast addresses"
	case a.IsLoopback() && !l.AllowLoopback:
		what = `a loopback address, the provider's own host; set the Provider's parameters.allowLoopbackImports to "true" to import from it`
	default:
		return nil
	}
	return &addressError{host: host, addr: a, what: what}
}

// redirectError is a redirect the download client refuses to follow.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

// newImportClient is the HTTP client downloads use: the system's roots and proxy
// settings, redirects only to http and https (MaxImportRedirects at most) and to no host
// that is a refused address, and a dial guard that checks, when it connects, the address
// the name resolved to, so neither a DNS answer nor a redirect reaches a refused address.
// With a proxy (HTTPS_PROXY and the like), the guard sees the proxy's address. observe,
// when set, is told every address the client is about to connect to, for tests.
func newImportClient(l ImportLimits, observe func(address string)) *http.Client {
	dialer := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		// Control runs after the name is resolved and before the connection is made.
		Control: func(_, address string, _ syscall.RawConn) error {
			if observe != nil {
				observe(address)
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("cannot tell the address of %s", address)
			}
			return l.checkAddr("", ap.Addr())
		},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = dialer.DialContext
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			to := redact.URL(req.URL.String())
			if len(via) >= MaxImportRedirects {
				return &redirectError{fmt.Sprintf("it redirects more than %d times; set importFrom to the image's final URL", MaxImportRedirects)}
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return &redirectError{fmt.Sprintf("it redirects to %s, which is not an http or https URL; set importFrom to an http or https URL that serves the image", to)}
			}
			if a, err := netip.ParseAddr(req.URL.Hostname()); err == nil {
				if err := l.checkAddr(req.URL.Hostname(), a); err != nil {
					return &redirectError{fmt.Sprintf("it redirects to %s, and %s", to, err)}
				}
			}
			return nil
		},
	}
}

// limitError is an import stopped by one of the Provider's limits, saying which.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// downloadProblem is what a failed request or read says, for a person: the limit or
// guard that stopped it, else the innermost error, redacted.
func downloadProblem(ctx context.Context, err error) string {
	var (
		le *limitError
		ae *addressError
		re *redirectError
	)
	switch {
	case errors.As(context.Cause(ctx), &le):
		return le.msg
	case errors.As(err, &le):
		return le.msg
	case errors.As(err, &re):
		return re.msg
	case errors.As(err, &ae):
		return ae.Error()
	}
	return redact.Text(RootCause(err))
}

// humanBytes is n in the largest binary unit it reaches, e.g. "80Gi" or "1.5Mi".
func humanBytes(n int64) string {
	units := []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	v, unit := float64(n)/1024, units[0]
	for _, u := range units[1:] {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + unit
}
