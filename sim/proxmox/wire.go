package proxmoxsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits pveproxy puts on request bodies: form data is small, uploads are not.
const (
	maxPostSize   = 512 << 10
	maxUploadSize = 1 << 30
)

// upload is the file part of a multipart upload, which pveproxy spools to a
// temporary file before the handler runs.
type upload struct {
	filename string
	data     []byte
}

// writeData answers 200 with the PVE envelope.
func writeData(w http.ResponseWriter, data any) {
	body, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		writeError(w, failf("failed to encode the answer: %v", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	pveHeaders(h)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func pveHeaders(h http.Header) {
	now := time.Now().UTC().Format(http.TimeFormat)
	h.Set("Server", "pve-api-daemon/3.0")
	h.Set("Date", now)
	h.Set("Expires", now)
	h.Set("Cache-Control", "max-age=0")
	h.Set("Pragma", "no-cache")
}

// writeError answers e the way pveproxy does: the message, first line only, is the
// reason phrase (older clients read it from there); the body is the JSON formatter's
// {"data":null,"message":…} for an API handler's error (PVE >= 8.3), nothing or plain
// text for pveproxy's own; and the connection closes after any status of 400 or
// more. net/http cannot write a reason phrase of its own, so the response is written
// by hand on the hijacked connection.
func writeError(w http.ResponseWriter, e *apiError) {
	var body []byte
	contentType := ""
	switch e.body {
	case jsonBody:
		env := map[string]any{"data": nil, "message": e.bodyMessage()}
		if len(e.errors) > 0 {
			env["errors"] = e.errors
		}
		body, _ = json.Marshal(env)
		contentType = "application/json;charset=UTF-8"
	case textBody:
		body = []byte(e.message)
	}
	reason, _, _ := strings.Cut(strings.TrimSpace(e.message), "\n")
	if reason == "" {
		reason = http.StatusText(e.status)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		// Not HTTP/1.1: the status goes through, the reason does not.
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(e.status)
		_, _ = w.Write(body) //nolint:gosec // JSON or pveproxy's plain-text message, as PVE answers
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	h := http.Header{}
	pveHeaders(h)
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", e.status, reason)
	_ = h.Write(&b)
	b.WriteString("\r\n")
	b.Write(body)
	_, _ = rw.Write(b.Bytes())
	_ = rw.Flush()
}

// readParams merges a request's parameters as pveproxy's extract_params does: the
// body of a POST or PUT (form-encoded or JSON, which go-proxmox sends), then the
// query string on top. A multipart body is an upload: its fields are parameters and
// its "filename" part is the file.
func readParams(r *http.Request) (map[string]string, *upload, *apiError) {
	params := map[string]string{}
	var up *upload
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		ct, ctParams, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		var err *apiError
		switch ct {
		case "multipart/form-data":
			up, err = readMultipart(r, ctParams["boundary"], params)
		case "application/json":
			err = readJSON(r, params)
		case "", "application/x-www-form-urlencoded":
			err = readForm(r, params)
		default:
			err = proxyError(506, "upload 'Content-Type '%s' not implemented", ct)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			params[k] = v[0]
		}
	}
	delete(params, "_dc")
	return params, up, nil
}

func readJSON(r *http.Request, params map[string]string) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPostSize+1))
	if err != nil || len(body) > maxPostSize {
		return proxyError(http.StatusNotImplemented, "for data too large")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return failf("malformed JSON string: %v", err)
	}
	for k, v := range raw {
		if s, ok := jsonParam(v); ok {
			params[k] = s
		}
	}
	return nil
}

// jsonParam turns a JSON value into the string PVE's schema checks see: booleans
// become 1/0, numbers their digits, arrays NUL-joined as Perl's CGI lists.
func jsonParam(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", false
	case string:
		return v, true
	case bool:
		if v {
			return "1", true
		}
		return "0", true
	case json.Number:
		return v.String(), true
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := jsonParam(e); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\x00"), true
	default:
		b, _ := json.Marshal(v)
		return string(b), true
	}
}

func readForm(r *http.Request, params map[string]string) *apiError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPostSize+1))
	if err != nil || len(body) > maxPostSize {
		return proxyError(http.StatusNotImplemented, "for data too large")
	}
	values, err := url.ParseQuery(string(body))
	if err != nil {
		return failf("unable to parse form data: %v", err)
	}
	for k, v := range values {
		params[k] = strings.Join(v, "\x00")
	}
	return nil
}

func readMultipart(r *http.Request, boundary string, params map[string]string) (*upload, *apiError) {
	if boundary == "" {
		return nil, proxyError(http.StatusNotImplemented, "upload failed")
	}
	mr := multipart.NewReader(io.LimitReader(r.Body, maxUploadSize), boundary)
	var up *upload
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, proxyError(http.StatusNotImplemented, "upload failed")
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return nil, proxyError(http.StatusNotImplemented, "upload failed")
		}
		if part.FileName() != "" {
			// pveproxy takes the file only from the part called "filename".
			if part.FormName() != "filename" {
				return nil, proxyError(http.StatusNotImplemented, "upload failed")
			}
			up = &upload{filename: part.FileName(), data: data}
			params["filename"] = part.FileName()
			continue
		}
		params[part.FormName()] = string(data)
	}
	if up == nil {
		return nil, proxyError(http.StatusNotImplemented, "upload failed")
	}
	return up, nil
}
