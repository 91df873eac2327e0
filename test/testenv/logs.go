package testenv

import (
	"bytes"
	"sync"
)

// logs watches every controller log line the suite's process writes for the values a
// test forbids (credentials, tokens, Secret contents), without keeping the log.
var logs = &logWatch{}

// logWatch is written to by many controllers at once.
type logWatch struct {
	mu        sync.Mutex
	forbidden [][]byte
	leaked    []string
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.forbidden {
		if bytes.Contains(p, v) && len(w.leaked) < 20 {
			w.leaked = append(w.leaked, string(p))
		}
	}
	return len(p), nil
}

// ForbidInLogs makes every later controller log line that contains one of values a leak,
// which LeakedLogLines returns. Values shorter than 6 bytes are ignored: they would match
// by chance.
func ForbidInLogs(values ...string) {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, v := range values {
		if len(v) >= 6 {
			logs.forbidden = append(logs.forbidden, []byte(v))
		}
	}
}

// LeakedLogLines returns the log lines (at most 20) that contained a forbidden value.
func LeakedLogLines() []string {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	return append([]string(nil), logs.leaked...)
}
