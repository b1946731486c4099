package kube

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"k8s.io/client-go/rest"
)

// fakeDial fails its first fails attempts with err (after the attempt's
// deadline when err is nil: a dropped SYN), then connects.
func fakeDial(fails int, err error, calls *atomic.Int32) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		if int(calls.Add(1)) <= fails {
			if err != nil {
				return nil, err
			}
			<-ctx.Done()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
		}
		c, _ := net.Pipe()
		return c, nil
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

func TestRedialerRetriesSilenceAndRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"silence", nil},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log, hook := test.NewNullLogger()
			var calls atomic.Int32
			d := &redialer{log: log, attempt: 20 * time.Millisecond, patience: time.Second, dial: fakeDial(5, c.err, &calls)}
			start := time.Now()
			conn, err := d.DialContext(context.Background(), "tcp", "10.0.0.1:6443")
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			conn.Close()
			took := time.Since(start)
			if calls.Load() != 6 {
				t.Errorf("%d attempts, want 6", calls.Load())
			}
			// Five failed attempts, each at least a quarter attempt apart
			// (jitter) and, for silence, a whole attempt long.
			if took < 5*5*time.Millisecond || took > 5*40*time.Millisecond+100*time.Millisecond {
				t.Errorf("took %v for five failed attempts of 20 ms", took)
			}
			var msgs []string
			for _, e := range hook.AllEntries() {
				msgs = append(msgs, e.Level.String()+" "+e.Message)
			}
			if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "warning API server unreachable") || !strings.HasPrefix(msgs[1], "info API server reachable again") {
				t.Errorf("want one warning and one note, got %q", msgs)
			}
		})
	}
}

func TestRedialerGivesUpAfterPatience(t *testing.T) {
	log, _ := test.NewNullLogger()
	var calls atomic.Int32
	refused := os.NewSyscallError("connect", syscall.ECONNREFUSED)
	d := &redialer{log: log, attempt: 20 * time.Millisecond, patience: 200 * time.Millisecond,
		dial: fakeDial(1000, &net.OpError{Op: "dial", Net: "tcp", Err: refused}, &calls)}
	_, err := d.DialContext(context.Background(), "tcp", "10.0.0.1:6443")
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "unreachable for") {
		t.Fatalf("want the last refusal, wrapped with how long: %v", err)
	}
	// The caller's cancel ends the attempts at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.DialContext(ctx, "tcp", "10.0.0.1:6443"); err == nil {
		t.Fatal("dial with a cancelled context succeeded")
	}
}

func TestFastReconnectKeepsTheOperatorsSettings(t *testing.T) {
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "7")
	os.Unsetenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS")
	t.Cleanup(func() { os.Unsetenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS") })
	cfg := &rest.Config{Host: "https://10.0.0.1:6443"}
	FastReconnect(cfg, logrus.New())
	if cfg.Dial == nil {
		t.Error("no dialer set")
	}
	if got := os.Getenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS"); got != "10" {
		t.Errorf("HTTP2_READ_IDLE_TIMEOUT_SECONDS=%q, want 10", got)
	}
	if got := os.Getenv("HTTP2_PING_TIMEOUT_SECONDS"); got != "7" {
		t.Errorf("HTTP2_PING_TIMEOUT_SECONDS=%q, want the operator's 7", got)
	}
}
