package proxmoxsim

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ticketLifetime is how long a PVE ticket, and the CSRF token issued with it, is
// valid; clients renew by posting the ticket as the password.
const ticketLifetime = 2 * time.Hour

var (
	ticketValue = regexp.MustCompile(`(?:^|\s|;)PVEAuthCookie[=\s]([^;]*)`)
	tokenValue  = regexp.MustCompile(`(?:^|\s|;)PVEAPIToken[=\s]([^;]*)`)
)

// authValue finds name's value in a Cookie or Authorization header, as pveproxy's
// extract_auth_value does: "name=value" or "name value", ';' separating pairs.
func authValue(header string, re *regexp.Regexp) string {
	m := re.FindStringSubmatch(header)
	if m == nil {
		return ""
	}
	v, err := url.PathUnescape(strings.TrimSpace(m[1]))
	if err != nil {
		return strings.TrimSpace(m[1])
	}
	return v
}

// authenticate is pveproxy's auth_handler: the ticket cookie, then a ticket in the
// Authorization header, then an API token; writes with a ticket need the CSRF
// token, except uploads (browsers' forms cannot send it) and API tokens (stateless
// by design). It returns who is calling.
func (s *Simulator) authenticate(r *http.Request, path string) (string, *apiError) {
	if (path == "/access/domains" && r.Method == http.MethodGet) || path == "/access/ticket" {
		return "", nil
	}
	ticket := authValue(r.Header.Get("Cookie"), ticketValue)
	if ticket == "" {
		ticket = authValue(r.Header.Get("Authorization"), ticketValue)
	}
	if ticket == "" {
		if token := authValue(r.Header.Get("Authorization"), tokenValue); token != "" {
			id, ok := s.verifyToken(token)
			if !ok {
				return "", unauthorized("Authentication failed!")
			}
			return id, nil
		}
		return "", unauthorized("No ticket")
	}
	user, ok := s.verifyTicket(ticket)
	if !ok {
		return "", unauthorized("Authentication failed!")
	}
	upload := r.Method == http.MethodPost && strings.HasSuffix(path, "/upload") && strings.HasPrefix(path, "/nodes/")
	if r.Method != http.MethodGet && !upload && !s.verifyCSRF(user, r.Header.Get("CSRFPreventionToken")) {
		return "", unauthorized("Permission denied - invalid csrf token")
	}
	return user, nil
}

// verifyToken checks "user@realm!name=secret" and returns the token ID.
func (s *Simulator) verifyToken(token string) (string, bool) {
	id, secret, ok := strings.Cut(token, "=")
	if !ok {
		return "", false
	}
	want, known := s.tokens[id] // users and tokens never change after Start
	return id, known && subtle.ConstantTimeCompare([]byte(secret), []byte(want)) == 1
}

func (s *Simulator) sign(plain string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(plain))
	return base64.RawStdEncoding.EncodeToString(m.Sum(nil))
}

// issueTicket makes a ticket shaped like PVE's, PVE:<user>:<hex time>::<signature>,
// and its CSRF prevention token, <hex time>:<signature>.
func (s *Simulator) issueTicket(user string, now time.Time) (ticket, csrf string) {
	ts := fmt.Sprintf("%08X", now.Unix())
	plain := "PVE:" + user + ":" + ts
	return plain + "::" + s.sign(plain), ts + ":" + s.sign(ts+":"+user)
}

func fresh(hexTime string, now time.Time) bool {
	t, err := strconv.ParseInt(hexTime, 16, 64)
	if err != nil {
		return false
	}
	age := now.Unix() - t
	return age > -300 && age < int64(ticketLifetime/time.Second)
}

// verifyTicket returns the user a valid, unexpired ticket belongs to.
func (s *Simulator) verifyTicket(ticket string) (string, bool) {
	plain, sig, ok := strings.Cut(ticket, "::")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.sign(plain))) {
		return "", false
	}
	parts := strings.Split(plain, ":")
	if len(parts) != 3 || parts[0] != "PVE" || !fresh(parts[2], time.Now()) {
		return "", false
	}
	_, known := s.users[parts[1]]
	return parts[1], known
}

func (s *Simulator) verifyCSRF(user, token string) bool {
	ts, sig, ok := strings.Cut(token, ":")
	return ok && fresh(ts, time.Now()) && hmac.Equal([]byte(sig), []byte(s.sign(ts+":"+user)))
}

// postTicket logs in with a password, or renews a ticket given as the password.
func (s *Simulator) postTicket(c *call) (any, error) {
	user, password := c.params["username"], c.params["password"]
	if user == "" {
		return nil, missing("username")
	}
	if realm := c.params["realm"]; realm != "" && !strings.Contains(user, "@") {
		user += "@" + realm
	}
	want, known := s.users[user]
	valid := known && subtle.ConstantTimeCompare([]byte(password), []byte(want)) == 1
	if !valid && strings.HasPrefix(password, "PVE:") {
		owner, ok := s.verifyTicket(password)
		valid = ok && owner == user
	}
	if !valid {
		// A failed login is a handler error, not the auth handler's: it has a body.
		return nil, &apiError{status: http.StatusUnauthorized, message: "authentication failure"}
	}
	ticket, csrf := s.issueTicket(user, time.Now())
	return map[string]any{
		"username": user, "ticket": ticket, "CSRFPreventionToken": csrf, "clustername": ClusterName,
		"cap": s.capabilities(user),
	}, nil
}

// capabilities is the ticket's cap object, compute_api_permission's summary for the
// GUI: per top-level path, the user's privileges of that kind there.
func (s *Simulator) capabilities(user string) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, c := range []struct{ key, path, prefix string }{
		{"vms", "/vms", "VM."}, {"storage", "/storage", "Datastore."}, {"nodes", "/nodes", "Sys."},
		{"dc", "/", "Sys.Audit"}, {"sdn", "/sdn", "SDN."}, {"access", "/access", "User."}, {"mapping", "/mapping", "Mapping."},
	} {
		privs := map[string]int{}
		for p := range s.privileges(user, c.path) {
			if strings.HasPrefix(p, c.prefix) {
				privs[p] = 1
			}
		}
		out[c.key] = privs
	}
	return out
}

func (s *Simulator) getDomains(*call) (any, error) {
	return []map[string]any{
		{"realm": "pam", "type": "pam", "comment": "Linux PAM standard authentication"},
		{"realm": "pve", "type": "pve", "comment": "Proxmox VE authentication server"},
	}, nil
}
