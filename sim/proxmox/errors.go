package proxmoxsim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// StatusNodeUnreachable is the status pveproxy answers when it cannot forward a
// request to the node the path names (AnyEvent::HTTP's connect failure), which
// go-proxmox reports as proxmox.ErrNodeUnreachable.
const StatusNodeUnreachable = 595

// bodyKind is what an error answer carries besides its status line.
type bodyKind int

const (
	// jsonBody is an API handler's error as PVE >= 8.3's JSON formatter writes it:
	// {"data":null,"message":"<text>\n"}, with "errors" for parameter errors.
	jsonBody bodyKind = iota
	// noBody is an empty body: pveproxy's authentication failures and the answers
	// it relays from a node it could not reach.
	noBody
	// textBody is the message as plain text: pveproxy's own errors (an unknown URI,
	// a body too large), which libpve-http-server-perl >= 5.2 writes into the body.
	textBody
)

// apiError is an error as pveproxy answers it: a status, a message that travels as the
// HTTP reason phrase (first line) and in the body, and for parameter errors a map from
// parameter to complaint.
type apiError struct {
	status  int
	message string
	errors  map[string]string
	body    bodyKind
	// asIs keeps the message without the newline PVE's die messages end with: the
	// "not implemented" answer of pveproxy's rest_handler has none.
	asIs bool
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.message) }

// bodyMessage is the message as the JSON body carries it: Perl's die text, which
// ends with a newline.
func (e *apiError) bodyMessage() string {
	if e.asIs || strings.HasSuffix(e.message, "\n") {
		return e.message
	}
	return e.message + "\n"
}

// failf is what a PVE handler's die becomes: 500 with the message as the reason.
func failf(format string, a ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, message: fmt.Sprintf(format, a...)}
}

// paramError is PVE's raise_param_exc: 400 "Parameter verification failed." with the
// complaints in the body's errors object.
func paramError(errs map[string]string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: "Parameter verification failed.", errors: errs}
}

// paramErrorf is paramError for one parameter.
func paramErrorf(param, format string, a ...any) *apiError {
	return paramError(map[string]string{param: fmt.Sprintf(format, a...)})
}

// unauthorized is the answer of pveproxy's authentication handler: 401, the reason,
// no body.
func unauthorized(reason string) *apiError {
	return &apiError{status: http.StatusUnauthorized, message: reason, body: noBody}
}

// permissionDenied is PVE's raise_perm_exc: 403 "Permission check failed", followed by
// what was missing, "(<path>, <privilege>)", when the check says.
func permissionDenied(what string) *apiError {
	msg := "Permission check failed"
	if what != "" {
		msg += " (" + what + ")"
	}
	return &apiError{status: http.StatusForbidden, message: msg}
}

// proxyError is one of pveproxy's own errors, before any API handler runs: the
// message is the reason and the plain-text body.
func proxyError(status int, format string, a ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, a...), body: textBody}
}

// missing is PVE's complaint about a required parameter that is absent.
func missing(param string) *apiError {
	return paramErrorf(param, "property is missing and it is not optional")
}

// errText is an error's message as PVE prints it in a task log or wraps it in
// another message: without the status.
func errText(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.message
	}
	return err.Error()
}
