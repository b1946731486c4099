//go:build windows

package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc/mgr"
)

// recordingService records what install configures on the service and fails
// the call named in fail.
type recordingService struct {
	actions    []mgr.RecoveryAction
	reset      uint32
	nonCrash   []bool
	fail       string
	failWith   error
	setActions bool
}

func (r *recordingService) SetRecoveryActions(actions []mgr.RecoveryAction, resetPeriod uint32) error {
	if r.fail == "SetRecoveryActions" {
		return r.failWith
	}
	r.actions, r.reset, r.setActions = actions, resetPeriod, true
	return nil
}

func (r *recordingService) SetRecoveryActionsOnNonCrashFailures(flag bool) error {
	if r.fail == "SetRecoveryActionsOnNonCrashFailures" {
		return r.failWith
	}
	r.nonCrash = append(r.nonCrash, flag)
	return nil
}

// TestInstallRestartsOnNonCrashFailures: install makes the service manager
// restart the service after 5 s, 10 s, then every 30 s (count reset after a
// day), and also when the service stops itself with a non-zero exit code, the
// way it ends when the sync loop fails. A failure of either call fails the
// install, naming it, except a service manager that does not know the
// non-crash setting (ERROR_INVALID_LEVEL, as Wine's): a warning says the
// service restarts after a crash only.
func TestInstallRestartsOnNonCrashFailures(t *testing.T) {
	r := &recordingService{}
	var warn strings.Builder
	if err := setRestartOnFailure(r, &warn); err != nil {
		t.Fatal(err)
	}
	want := []mgr.RecoveryAction{{Type: mgr.ServiceRestart, Delay: 5 * time.Second}, {Type: mgr.ServiceRestart, Delay: 10 * time.Second}, {Type: mgr.ServiceRestart, Delay: 30 * time.Second}}
	if !r.setActions || !slices.Equal(r.actions, want) || r.reset != 86400 {
		t.Errorf("recovery actions %v reset %d, want %v reset 86400", r.actions, r.reset, want)
	}
	if !slices.Equal(r.nonCrash, []bool{true}) {
		t.Errorf("SetRecoveryActionsOnNonCrashFailures calls %v, want one with true: without it a service that stops itself with exit code 1 is never restarted", r.nonCrash)
	}
	if warn.Len() != 0 {
		t.Errorf("warnings when both calls succeed: %q", warn.String())
	}

	for _, c := range []struct {
		call     string
		err      error
		wantErr  string // "" for no error
		wantWarn string
	}{
		{"SetRecoveryActions", windows.ERROR_ACCESS_DENIED, "set restart on failure: ", ""},
		{"SetRecoveryActionsOnNonCrashFailures", windows.ERROR_ACCESS_DENIED, "set restart on a stop with a non-zero exit code (SERVICE_CONFIG_FAILURE_ACTIONS_FLAG): ", ""},
		{"SetRecoveryActionsOnNonCrashFailures", errors.Join(errors.New("change service config"), windows.ERROR_INVALID_LEVEL), "", "restarts after a crash only"},
	} {
		r := &recordingService{fail: c.call, failWith: c.err}
		var warn strings.Builder
		err := setRestartOnFailure(r, &warn)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s failing with %v: error %v, want a warning only", c.call, c.err, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, c.err)):
			t.Errorf("%s failing with %v: error %v, want one wrapping it and containing %q", c.call, c.err, err, c.wantErr)
		}
		if !strings.Contains(warn.String(), c.wantWarn) || (c.wantWarn == "" && warn.Len() != 0) {
			t.Errorf("%s failing with %v: warning %q, want %q", c.call, c.err, warn.String(), c.wantWarn)
		}
	}
}
