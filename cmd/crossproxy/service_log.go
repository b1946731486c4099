package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// The service's log file rotates by size so a node that logs for months
// keeps a bounded amount: at serviceLogMaxMB megabytes the file is renamed
// with a time stamp and a new one begun, and only the newest
// serviceLogBackups renamed files stay (at most 60 MB in all).
const (
	serviceLogMaxMB   = 10
	serviceLogBackups = 5
)

// rotatingLog is the service's log file at path, rotated by size (maxMB
// megabytes, keeping backups older files).
func rotatingLog(path string, maxMB, backups int) *lumberjack.Logger {
	return &lumberjack.Logger{Filename: path, MaxSize: maxMB, MaxBackups: backups, LocalTime: true}
}

// Event ids the Windows service writes to the event log.
const (
	eventInfo    = 1
	eventWarning = 2
	eventError   = 3
)

// eventWriter is the part of the Windows event log (*eventlog.Log) the
// service log uses; untagged so the line routing is tested on any OS.
type eventWriter interface {
	Info(eid uint32, msg string) error
	Warning(eid uint32, msg string) error
	Error(eid uint32, msg string) error
}

// logTee copies the service's log lines to its log file and forwards
// warnings and errors (logrus text or JSON) to the event log, so an operator
// sees problems in the Event Viewer without the per-sync chatter.
type logTee struct {
	mu     sync.Mutex
	file   io.Writer
	events eventWriter // nil: file only
}

func (t *logTee) copy(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		t.line(sc.Text())
	}
}

// logLevel finds a logrus level in a text or JSON log line.
func logLevel(s string) string {
	for _, l := range []string{"fatal", "error", "warning"} {
		if strings.Contains(s, "level="+l) || strings.Contains(s, `"level":"`+l+`"`) {
			return l
		}
	}
	return ""
}

// line writes one log line.
func (t *logTee) line(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintln(t.file, s)
	if t.events == nil {
		return
	}
	var err error
	switch logLevel(s) {
	case "fatal", "error":
		err = t.events.Error(eventError, s)
	case "warning":
		err = t.events.Warning(eventWarning, s)
	}
	if err != nil {
		fmt.Fprintf(t.file, "event log write failed: %v\n", err)
	}
}

// event writes one service event (start, stop, failure) to both places.
func (t *logTee) event(id uint32, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.file, "%s service: %s\n", time.Now().UTC().Format(time.RFC3339), msg)
	if t.events == nil {
		return
	}
	var err error
	if id == eventError {
		err = t.events.Error(id, msg)
	} else {
		err = t.events.Info(id, msg)
	}
	if err != nil {
		fmt.Fprintf(t.file, "event log write failed: %v\n", err)
	}
}
