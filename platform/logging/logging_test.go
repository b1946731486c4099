package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestNewFormatsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	log.WithField("service", "ns/web").WithField("sync", 7).Debug("synced")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("not JSON: %q", buf.String())
	}
	if m["service"] != "ns/web" || m["sync"] != float64(7) || m["level"] != "debug" {
		t.Fatalf("fields %v", m)
	}
	if _, err := New(&buf, "xml", "info"); err == nil || !strings.Contains(err.Error(), "log format") {
		t.Fatalf("bad format: %v", err)
	}
	if _, err := New(&buf, "text", "loud"); err == nil || !strings.Contains(err.Error(), "log level") {
		t.Fatalf("bad level: %v", err)
	}
}

func TestKlogGoesThroughLogrus(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(&buf, "json", "info")
	RedirectKlog(log)
	defer klog.ClearLogger()
	klog.ErrorS(errors.New("connection refused"), "Failed to watch", "reflector", "services")
	klog.V(4).InfoS("hidden at info")
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, `"component":"client-go"`) || !strings.Contains(out, "connection refused") || !strings.Contains(out, `"reflector":"services"`) {
		t.Fatalf("klog error not in logrus output: %q", out)
	}
	if strings.Contains(out, "hidden at info") {
		t.Fatalf("V(4) shown at info: %q", out)
	}

	// At debug, client-go's V(4) lines (watch restarts, "too old resource
	// version") come through: klog's own verbosity follows the level.
	buf.Reset()
	dlog, _ := New(&buf, "json", "debug")
	RedirectKlog(dlog)
	klog.V(4).InfoS("watch closed", "reason", "too old resource version")
	klog.V(6).InfoS("hidden at debug")
	klog.Flush()
	if out := buf.String(); !strings.Contains(out, "too old resource version") || strings.Contains(out, "hidden at debug") {
		t.Fatalf("at debug: %q", out)
	}
	RedirectKlog(log) // back to info for the tests after this one
}

// TestRingKeepsTheLastLinesInOrder writes more lines than the ring holds
// through a real logger and checks the ring has the newest, oldest first,
// formatted as the logger writes them.
func TestRingKeepsTheLastLinesInOrder(t *testing.T) {
	var out bytes.Buffer
	log, err := New(&out, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRing(3)
	log.AddHook(r)
	if got := r.Lines(); len(got) != 0 {
		t.Fatalf("empty ring has %q", got)
	}
	for i := range 5 {
		log.WithField("n", i).Info("line")
	}
	log.Debug("below the level: not written, not kept")
	got := r.Lines()
	if len(got) != 3 {
		t.Fatalf("lines = %d %q, want 3", len(got), got)
	}
	for i, l := range got {
		if !strings.Contains(l, fmt.Sprintf(`"n":%d`, i+2)) || !strings.HasPrefix(l, "{") {
			t.Errorf("line %d = %s, want the JSON line of n=%d", i, l, i+2)
		}
	}
	written := strings.Split(strings.TrimSpace(out.String()), "\n")
	if written[len(written)-1] != got[2] {
		t.Errorf("ring's newest %q differs from the logger's last line %q", got[2], written[len(written)-1])
	}
}
