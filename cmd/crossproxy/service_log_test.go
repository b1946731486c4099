package main

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
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
