package proxmoxsim

import (
	"errors"
	"fmt"
	"net/http"
)

// StatusNodeUnreachable is the status pveproxy answers when it cannot forward a
// request to the node the path names (AnyEvent::HTTP's connect failure), which
// go-proxmox reports as proxmox.ErrNodeUnreachable.
const StatusNodeUnreachable = 595

// apiError is an error as pveproxy answers it: a status, a message that travels as the
// HTTP reason phrase, and for parameter errors a map from parameter to complaint that
// travels in the body.
type apiError struct {
	status  int
	message string
	errors  map[string]string
	// noBody answers with an empty body, as pveproxy does for failed authentication.
	noBody bool
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.message) }

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
	return &apiError{status: http.StatusUnauthorized, message: reason, noBody: true}
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
