package logging

import (
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// Ring keeps the last lines the logger wrote, formatted as it writes them,
// so the secure endpoint can hand them to `crossproxy bundle`: a bug report
// gets the proxy's recent log without anyone reading the node's files or
// the container runtime's. It is a logrus hook; add it with AddHook.
type Ring struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

// NewRing keeps the last n lines (n >= 1).
func NewRing(n int) *Ring {
	return &Ring{lines: make([]string, max(n, 1))}
}

// Levels is every level: what the logger writes is what the ring keeps.
func (r *Ring) Levels() []logrus.Level { return logrus.AllLevels }

// Fire formats the entry with its logger's formatter and keeps it.
func (r *Ring) Fire(e *logrus.Entry) error {
	var line string
	if e.Logger != nil && e.Logger.Formatter != nil {
		b, err := e.Logger.Formatter.Format(e)
		if err != nil {
			return err
		}
		line = strings.TrimRight(string(b), "\n")
	} else {
		line = e.Message
	}
	r.mu.Lock()
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
	if r.next == 0 {
		r.full = true
	}
	r.mu.Unlock()
	return nil
}

// Lines returns the kept lines, oldest first.
func (r *Ring) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]string(nil), r.lines[:r.next]...)
	}
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}
