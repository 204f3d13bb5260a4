package harness

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// logger writes progress lines stamped with the time since the run began.
// It is handed to whatever logs; there is no package-level logger.
type logger struct {
	mu     *sync.Mutex // shared by every logger derived with with
	w      io.Writer
	start  time.Time
	prefix string
}

func newLogger(w io.Writer, start time.Time, prefix string) *logger {
	return &logger{mu: new(sync.Mutex), w: w, start: start, prefix: prefix}
}

// with returns a logger that adds prefix to every line, writing to the
// same place under the same lock.
func (l *logger) with(prefix string) *logger {
	return &logger{mu: l.mu, w: l.w, start: l.start, prefix: l.prefix + prefix}
}

func (l *logger) Printf(format string, args ...any) {
	line := fmt.Sprintf("[e2e +%5.1fs] %s%s\n", time.Since(l.start).Seconds(), l.prefix, fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, line) // progress output: nothing to do when it fails
}
