// Package logging builds crossproxy's logrus logger (text or JSON, a level)
// and routes client-go's klog output into it, so an operator gets one log
// stream in one format, with the fields crossproxy uses throughout: node,
// service and sync (the sync id).
package logging

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// New returns a logger writing to out in format ("text" or "json") at level
// (a logrus level name). Errors name the setting.
func New(out io.Writer, format, level string) (*logrus.Logger, error) {
	log := logrus.New()
	log.SetOutput(out)
	lv, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	log.SetLevel(lv)
	switch format {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("log format: %q is not text or json", format)
	}
	return log, nil
}

// RedirectKlog sends klog (client-go's reflector, leader, event messages)
// through log, with "component": "client-go". klog verbosity 0-1 maps to
// info, 2-4 to debug and higher to trace, so --log-level debug shows
// client-go's watch restarts and trace everything.
//
// klog decides V(n) itself, by its own -v, before anything reaches the
// sink, so the verbosity is raised to match: 4 at debug, 10 at trace.
func RedirectKlog(log *logrus.Logger) {
	klog.SetLogger(logr.New(&sink{base: log, log: log.WithField("component", "client-go")}))
	v := 1
	switch {
	case log.IsLevelEnabled(logrus.TraceLevel):
		v = 10
	case log.IsLevelEnabled(logrus.DebugLevel):
		v = 4
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v)) // a number klog's flag always accepts
}

// sink is a logr.LogSink over logrus.
type sink struct {
	base *logrus.Logger
	log  *logrus.Entry
	name string
}

func (s *sink) Init(logr.RuntimeInfo) {}

func (s *sink) Enabled(level int) bool { return s.base.IsLevelEnabled(levelOf(level)) }

func levelOf(v int) logrus.Level {
	switch {
	case v <= 1:
		return logrus.InfoLevel
	case v <= 4:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}

func (s *sink) fields(kv []any) logrus.Fields {
	f := logrus.Fields{}
	if s.name != "" {
		f["logger"] = s.name
	}
	for i := 0; i+1 < len(kv); i += 2 {
		f[fmt.Sprint(kv[i])] = kv[i+1]
	}
	return f
}

func (s *sink) Info(level int, msg string, kv ...any) {
	s.log.WithFields(s.fields(kv)).Log(levelOf(level), strings.TrimSpace(msg))
}

func (s *sink) Error(err error, msg string, kv ...any) {
	s.log.WithFields(s.fields(kv)).WithError(err).Error(strings.TrimSpace(msg))
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{base: s.base, log: s.log.WithFields(s.fields(kv)), name: s.name}
}

func (s *sink) WithName(name string) logr.LogSink {
	n := name
	if s.name != "" {
		n = s.name + "." + name
	}
	return &sink{base: s.base, log: s.log, name: n}
}
