package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type recordedEvents struct {
	got  []string
	fail bool
}

func (r *recordedEvents) add(kind string, id uint32, msg string) error {
	r.got = append(r.got, fmt.Sprintf("%s %d %s", kind, id, msg))
	if r.fail {
		return errors.New("event log full")
	}
	return nil
}
func (r *recordedEvents) Info(id uint32, m string) error    { return r.add("info", id, m) }
func (r *recordedEvents) Warning(id uint32, m string) error { return r.add("warning", id, m) }
func (r *recordedEvents) Error(id uint32, m string) error   { return r.add("error", id, m) }

// TestServiceLogRouting: every line reaches the log file; warnings and
// errors (text and JSON logrus output) and service events reach the event
// log; a failing event log is noted in the file.
func TestServiceLogRouting(t *testing.T) {
	var file bytes.Buffer
	ev := &recordedEvents{}
	tee := &logTee{file: &file, events: ev}
	tee.copy(strings.NewReader(strings.Join([]string{
		`time="x" level=info msg="rules in sync"`,
		`time="x" level=warning msg="endpoints not known to HNS yet"`,
		`{"level":"error","msg":"hns sync failed"}`,
		`time="x" level=fatal msg=boom`,
	}, "\n")))
	tee.event(eventInfo, "started")
	tee.event(eventError, "failed")
	want := []string{
		`warning 2 time="x" level=warning msg="endpoints not known to HNS yet"`,
		`error 3 {"level":"error","msg":"hns sync failed"}`,
		`error 3 time="x" level=fatal msg=boom`,
		"info 1 started",
		"error 3 failed",
	}
	if !reflect.DeepEqual(ev.got, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(ev.got, "\n"), strings.Join(want, "\n"))
	}
	if n := strings.Count(file.String(), "\n"); n != 6 || !strings.Contains(file.String(), "rules in sync") {
		t.Fatalf("log file:\n%s", file.String())
	}
	ev.fail = true
	tee.line(`level=error msg=x`)
	if !strings.Contains(file.String(), "event log write failed: event log full") {
		t.Fatalf("a failed event write must be noted:\n%s", file.String())
	}
}

// TestServiceLogRotates: the service's log file is renamed at its size
// limit and a new one begun, and only the newest backups stay, so the log
// of a long-running node takes a bounded amount of disk.
func TestServiceLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "crossproxy.log")
	l := rotatingLog(path, 1, 2)
	line := strings.Repeat("x", 1023) + "\n"
	for range 5 * 1024 { // 5 MiB in 1 KiB lines: four rotations at 1 MiB
		if _, err := io.WriteString(l, line); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var files []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		files = files[:0]
		for _, e := range es {
			files = append(files, e.Name())
		}
		// Old backups are removed in the background after a rotation.
		if len(files) <= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(files) != 3 {
		t.Fatalf("log files %v, want the current one and 2 backups", files)
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() > 1<<20 {
			t.Fatalf("%s: %v bytes (%v), want at most 1 MiB", f, st.Size(), err)
		}
	}
}
